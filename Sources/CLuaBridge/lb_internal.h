/* Internals shared by the bridge's C files. Only this target includes lua.h. */
#ifndef MOONBASE_LB_INTERNAL_H
#define MOONBASE_LB_INTERNAL_H
#include "luabridge.h"
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

typedef struct { char *p; size_t n, cap; } lb_buf;

/* A call whose heap grew by more than this is collected and trimmed when it ends. */
#define LB_HEAVY_CALL_BYTES ((size_t)16 << 20)
/* The JSON scratch buffer is kept across calls up to this capacity (and freed when larger). */
#define LB_SCRATCH_KEEP ((size_t)1 << 20)

struct lb_vm {
    lua_State *L;
    int strict;
    int swift_depth;            /* > 0 while a Swift host function runs (strict mode) */
    lb_host_fn host;
    void *host_ctx;
    /* memory */
    size_t mem_used;
    size_t mem_limit;           /* 0 = unlimited: min(call start + max_memory, max_vm_memory) */
    int mem_limit_is_vm;        /* mem_limit is the VM's absolute cap (LB_KILL_VM_MEMORY) */
    int mem_refused_vm;         /* an allocation was refused at the VM's cap during this call */
    int over_vm_limit;          /* the last call was stopped by the VM's cap */
    size_t mem_start;           /* heap at the outermost call's start */
    size_t mem_peak;            /* highest heap during the outermost call */
    size_t scratch_limit;       /* 0 = none: the cap of the JSON text being encoded (a result) */
    int64_t max_result;
    size_t mem_settled;         /* mem_used right after the last full collection begin_limits ran */
    /* limits of the current outermost call */
    int depth;                  /* nesting of lb_call / lb_load */
    int64_t max_instructions;
    int64_t instructions;
    volatile sig_atomic_t killed;   /* LB_KILL_* */
    char kill_where[160];
    /* watchdog (read by the watchdog thread) */
    _Atomic int64_t deadline_ns;    /* 0 = no deadline */
    _Atomic uint64_t call_gen;
    _Atomic uint64_t kill_req_gen;
    _Atomic int kill_req_reason;    /* LB_KILL_TIMEOUT or LB_KILL_WRITER_HOLD, set before the signal */
    _Atomic int64_t hold_deadline_ns;   /* 0 = this thread holds no writer (lb_hold_begin) */
    int hold_depth;
    struct lb_vm *prev_current;     /* the thread's current VM before this call began */
    int64_t last_signal_ns;         /* watchdog thread only */
    pthread_t owner;
    struct lb_vm *wd_next, *wd_prev;
    /* last error (set by the message handler) */
    int32_t err_code;
    char *err_msg;
    size_t err_len;
    char err_where[160];
    /* a buffer handed over by a host call, freed at the next one (it may leak past a raise) */
    char *pending;
    /* registry refs of shared objects */
    int ref_current;            /* {[1] = the running call's globals table, or false} */
    int ref_base;               /* read-only base table */
    int ref_msgh;               /* the VM's message handler */
    int ref_proxy;              /* an _ENV proxy with module globals of its own (load's fallback) */
    int ref_modsrc;             /* module name ("lib.geo") -> {file, source} */
    int ref_loaded;             /* module name -> its table, or the loading marker */
    int ref_callstack;          /* array of the per-call globals tables in use */
    int ref_namespaces;         /* ns name -> hidden table behind its locked proxy */
    int callstack_n;
    lb_buf scratch;             /* JSON encoding scratch (transient; copied out at once) */
    /* What the top-level object of an encoding held (LB_MEMBER_*; bits are only added, so
     * encode_result clears them before it encodes a result) and where its `json` member's
     * value lies in the buffer. */
    uint32_t top_members;
    size_t top_json_off, top_json_len;
    /* attempts (lb_limits.attempt_ns): the outermost call runs on a coroutine that may yield */
    lua_State *volatile cur;    /* the coroutine running the outermost call, or NULL (vm->L) */
    int attempting;             /* the running coroutine may yield (budget, host function) */
    int64_t attempt_deadline;   /* monotonic ns after which the attempt yields */
    int suspended;              /* a call is suspended (LB_SUSPENDED) */
    int resuming;               /* lb_run_protected: keep the suspended call's limits */
    int co_ref;                 /* registry ref of the call coroutine (0 = none) */
    int susp_arg_ref;           /* registry ref of the suspended call's first argument */
    int susp_base_n;            /* callstack_n before the suspended call began */
    int where_fixed;            /* err_where already set (from the coroutine): msgh keeps it */
    int attempt_stuck;          /* the last attempt ran past its budget where it could not yield */
    unsigned char inline_safe[256];
};

/* Count-hook interval (instructions between hook calls). */
#define LB_HOOK_COUNT 1000

struct lb_out {
    int type;
    int boolean;
    int64_t integer;
    double number;
    char *buf;
    size_t len;
    int32_t code;
    int32_t kill;
    size_t tag_len;   /* LB_JSON: > 0 when buf holds a className after the text and its NUL */
};

/* registry keys (light userdata addresses) */
extern const char lb_key_array_mt;
extern const char lb_key_error_mt;
extern const char lb_key_lockmt;

lb_vm *lb_from(lua_State *L);
void lb_where(lua_State *L, int level, char *out, size_t cap);
void lb_kill(lua_State *L, lb_vm *vm, int reason);   /* raises */
void lb_arm_kill_hook(lua_State *L);
int64_t lb_now_ns(void);
/* Sets the hook of `co` for the running call: the kill hook once killed, else the count hook
 * when an instruction budget or an attempt needs it, else none. */
void lb_set_call_hook(lb_vm *vm, lua_State *co);
int lb_killed_or_mem(lua_State *L, int status);

int lb_run_protected(lb_vm *vm, lua_CFunction body, void *arg, lb_limits lim, lb_result *res);
void lb_set_env_target(lua_State *L, lb_vm *vm, int tindex);
void lb_push_file_env(lua_State *L, lb_vm *vm);      /* pushes a new file's _ENV proxy */
int lb_require(lua_State *L);                        /* require(name), lua_CFunction */

/* sandbox (lb_sandbox.c) */
int lb_sandbox_open(lua_State *L);                   /* lua_CFunction, run in pcall */
void lb_push_locked(lua_State *L, int tindex);       /* pushes a locked userdata proxy of a table */
int lb_push_error_table(lua_State *L, lua_Integer code, const char *msg, size_t n);

/* json (lb_json.c) */
void lb_json_encode(lua_State *L, int idx, lb_buf *b);   /* appends; raises on bad values */
int lb_json_decode(lua_State *L, const char *s, size_t n);     /* pushes one value; raises */
/* Writes the table at idx as an LB_FLAT tape into buf[*used..cap) and fills v; 0 (nothing
 * written, v untouched) when the table is not flat or the tape does not fit. Never raises. */
int lb_flat_encode(lua_State *L, int idx, char *buf, size_t cap, size_t *used, lb_value *v);
int lb_json_lib(lua_State *L);                                 /* pushes the json table */
int lb_table_is_array(lua_State *L, int idx, lua_Integer *n);

/* patterns (lb_pattern.c) */
void lb_patterns_install(lua_State *L, int strtab);

/* bounded standard-library functions (lb_stdlib.c) */
void lb_stdlib_install(lua_State *L, int strtab, int tabtab);
void lb_tick(lua_State *L, unsigned steps);   /* raises a tripped limit; counts instructions */

#endif
