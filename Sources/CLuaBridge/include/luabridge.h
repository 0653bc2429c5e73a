#ifndef MOONBASE_LUABRIDGE_H
#define MOONBASE_LUABRIDGE_H
/*
 * The opaque C face of the Lua bridge. Swift sees no lua.h: only the
 * handles, plain value structs and functions below. Every entry that runs Lua code does so inside
 * lua_pcall of a C body, so no longjmp ever crosses a Swift frame; Lua→Swift calls go through a C
 * trampoline that converts arguments with non-raising reads, calls Swift, and replays the answer
 * (or raises) only after Swift has returned.
 */
#include <stddef.h>
#include <stdint.h>

typedef struct lb_vm lb_vm;
typedef struct lb_out lb_out;

/* Value kinds handed to Swift by the trampoline. */
enum {
    LB_NIL = 0, LB_BOOL = 1, LB_INT = 2, LB_NUM = 3, LB_STR = 4,
    LB_JSON = 5,   /* a table, JSON-encoded by C (str/len) */
    LB_FUNC = 6,   /* a Lua function: `ref` is a registry reference valid during the callback */
    LB_NULL = 7,   /* json.null */
    LB_OTHER = 8,  /* anything else: str holds the type name */
    LB_FLAT = 9    /* a table of at most LB_FLAT_MAX string keys with scalar values (a `where` of
                      equalities, an options table): str/len is a tape, `integer` its member
                      count. Per member: the key (one length byte, the bytes), a tag byte and the
                      value: 'S' a uint32 length and the bytes, 'I' an int64, 'N' a double (both
                      in host order, unaligned), 'T' / 'F' / 'Z' (true, false, json.null) nothing.
                      Keys and strings are valid UTF-8 and numbers finite: what LB_JSON would
                      have encoded, without the text. */
};
enum { LB_FLAT_MAX = 16 };

/* Why a call was killed (a tripped limit). */
enum { LB_KILL_NONE = 0, LB_KILL_TIMEOUT = 1, LB_KILL_MEMORY = 2, LB_KILL_INSTRUCTIONS = 3, LB_KILL_DBOPS = 4,
       LB_KILL_WRITER_HOLD = 5,
       LB_KILL_VM_MEMORY = 6,   /* the VM's whole heap (module state + this call) reached max_vm_memory */
       LB_KILL_RESULT = 7 };    /* the call's JSON result grew past max_result */

/* Outcome of lb_load / lb_call. LB_SUSPENDED: an attempt (lb_limits.attempt_ns) ran out of its
 * budget or reached a host function that is not inline-safe, and yielded; the VM now holds the
 * suspended call (and must run nothing else) until lb_resume_call or lb_discard_suspended. */
enum { LB_OK = 0, LB_ERROR = 1, LB_KILLED = 2, LB_SUSPENDED = 3 };

typedef struct {
    int32_t type;
    int32_t boolean;
    int64_t integer;
    double number;
    const char *str;
    size_t len;
    int32_t ref;
    int32_t keep;   /* Swift sets 1 to keep `ref` alive after the callback (released by lb_unref) */
} lb_value;

/* Per-call limits; applied by the outermost call only (nested calls share them). 0 = off. */
typedef struct {
    int64_t timeout_ms;
    int64_t max_memory;       /* bytes above the heap at call start */
    int64_t max_instructions;
    int64_t max_vm_memory;    /* bytes of the VM's whole heap, module state included */
    int64_t max_result;       /* bytes of the JSON text of the call's result */
    int64_t attempt_ns;       /* > 0: run as an attempt that suspends itself after this long, or at
                                 its first host function not marked inline-safe (outermost calls
                                 with LB_RESULT_RETURN only) */
} lb_limits;

/* Result of a load or call; free with lb_result_free. */
typedef struct {
    int32_t status;        /* LB_OK, LB_ERROR, LB_KILLED */
    int32_t kill_reason;   /* LB_KILL_* when killed */
    int32_t code;          /* Parse code of an error (141 for a bare error) */
    char *json;            /* LB_OK: the JSON text of the result ("null" for nil) */
    size_t json_len;
    /* LB_OK with a table (a JSON object) as the result: which of the members `json`, `status`,
     * `body` and `headers` it has (LB_MEMBER_* bits), and where the value of its `json` member
     * lies in `json`. A route's answer is read from these without parsing its JSON payload. */
    uint32_t members;
    size_t json_member_off, json_member_len;
    char *message;         /* LB_ERROR: the message */
    size_t message_len;
    char where[160];       /* "functions/a.lua:3" or "" */
} lb_result;

enum { LB_MEMBER_JSON = 1, LB_MEMBER_STATUS = 2, LB_MEMBER_BODY = 4, LB_MEMBER_HEADERS = 8 };

/* Extra fields set on the first argument (a table) before a call: raw byte strings (request
 * bodies need not be UTF-8) or host functions (job progress callbacks). */
typedef struct {
    const char *key;
    const char *bytes;     /* raw string when fnid < 0 */
    size_t len;
    int64_t fnid;          /* >= 0: a host function with this id */
} lb_extra;

/* Result shapes of lb_call. */
enum { LB_RESULT_RETURN = 0, LB_RESULT_FIELD = 1, LB_RESULT_RETURN_OR_FIELD = 2,
       /* or-ed in: run with the current call's globals (a callback of the running call) */
       LB_RESULT_SHARED_GLOBALS = 0x10 };

/* The Swift side of every host function. Return 0 after filling `out`, or the value of
 * lb_out_error / lb_out_kill. Must not call any lb_* function that runs Lua except lb_call. */
typedef int (*lb_host_fn)(void *ctx, int64_t fnid, lb_value *args, int nargs, lb_out *out);

/* Lifecycle. `strict` aborts if Lua allocates while a Swift host function is running. */
lb_vm *lb_new(int strict, lb_host_fn host, void *host_ctx);
void lb_close(lb_vm *vm);
/* Registers ns.name as a host function (a locked namespace is created on first use; a dotted
 * ns such as "crypto.base64" is a namespace inside another).
 * Returns 0, or -1 when out of memory or the namespace is a built-in library. */
int lb_register(lb_vm *vm, const char *ns, const char *name, int64_t fnid);

/* Compiles a text chunk and runs its top level with the module environment. */
int lb_load(lb_vm *vm, const char *chunkname, const char *src, size_t len, lb_limits limits, lb_result *res);
/* Calls a function reference with the arguments in `args`, an argument tape (its format is
 * documented in lb_call.c; Swift writes it with `LuaArgs`); args_len 0: no arguments.
 * Re-entrant from a host function (nested calls share the outer call's limits). */
int lb_call(lb_vm *vm, int32_t ref, const char *args, size_t args_len,
            const lb_extra *extras, int nextras, int32_t result_mode, const char *result_field,
            lb_limits limits, lb_result *res);
void lb_result_free(lb_result *res);
/* Finishes the suspended call on the calling thread (its limits, deadline and counters carry
 * on); the result is that of the call. */
int lb_resume_call(lb_vm *vm, lb_result *res);
/* Drops the suspended call (its per-call globals and coroutine); the VM is idle again. */
void lb_discard_suspended(lb_vm *vm);
/* 1 while the VM holds a suspended call. */
int lb_suspended(lb_vm *vm);
/* 1 when the last attempt ran past its budget where it could not yield (a comparator, a
 * metamethod called from C): the host stops attempting that handler. */
int lb_attempt_stuck(lb_vm *vm);
/* Marks host function `fnid` as safe to run during an attempt (it neither blocks nor has effects
 * outside the call: time, random ids, hashing). Others suspend the attempt before they run. */
void lb_set_inline_safe(lb_vm *vm, int64_t fnid);
/* Modules of functions/lib/: hand a module's source to the VM under its name ("lib.geo"); the
 * first require of it (from Lua, or lb_require_module) runs it. */
int lb_add_module(lb_vm *vm, const char *name, const char *src, size_t len);
int lb_require_module(lb_vm *vm, const char *name, lb_limits limits, lb_result *res);
void lb_unref(lb_vm *vm, int32_t ref);

/* Host function outputs. */
void lb_out_nil(lb_out *o);
void lb_out_bool(lb_out *o, int b);
void lb_out_int(lb_out *o, int64_t v);
void lb_out_num(lb_out *o, double v);
void lb_out_str(lb_out *o, const char *s, size_t n);
void lb_out_json(lb_out *o, const char *s, size_t n);     /* decoded to a Lua value by C */
/* Like lb_out_json, and each object of the value (the value itself, or each element of an array)
 * that has no `className` field gets `className = tag`: objects handed to Lua carry their class. */
void lb_out_json_tagged(lb_out *o, const char *s, size_t n, const char *tag, size_t tagn);
int lb_out_error(lb_out *o, int32_t code, const char *msg, size_t n);   /* returns -1 */
int lb_out_kill(lb_out *o, int32_t reason);                            /* returns -2 */

/* The calling thread holds the database writer from now until lb_hold_end: the running (or
 * next) call on this VM is killed with LB_KILL_WRITER_HOLD once `ms` have passed. Nested spans
 * keep the outermost deadline. Touches no Lua state: callable from a host function. */
void lb_hold_begin(lb_vm *vm, int64_t ms);
void lb_hold_end(lb_vm *vm);

/* During a host callback: "file:line" of the Lua code that called it (read-only, non-raising). */
void lb_caller_where(lb_vm *vm, char *out, size_t cap);

/* During a host callback (any thread may read it): milliseconds left before the running call's
 * wall-time limit, 0 once it has passed or the call was killed, -1 when it has no limit. */
int64_t lb_call_remaining_ms(lb_vm *vm);
/* 1 when the last call was stopped by max_vm_memory: the VM's module state leaves no room, so
 * the host should discard it (and build a fresh one for the next call). */
int lb_over_vm_limit(lb_vm *vm);
/* Asks the watchdog thread to return freed heap memory to the system (glibc malloc_trim) shortly
 * and again a few seconds later, once the host has dropped its copies of a large result. */
void lb_request_trim(void);

/* Introspection for tests and metrics. */
size_t lb_memory(lb_vm *vm);
int lb_depth(lb_vm *vm);
int lb_stack_top(lb_vm *vm);

/* Every global and namespace field a script can reach, one dotted name per line (malloc'd; the
 * caller frees it); NULL on failure. */
char *lb_api_names(lb_vm *vm, size_t *len);

/* Installs `cloud.codes` (NAME = code, read-only) from "NAME CODE\n" lines: the host's one list
 * of Parse error codes. */
int lb_set_error_codes(lb_vm *vm, const char *spec);

#endif
