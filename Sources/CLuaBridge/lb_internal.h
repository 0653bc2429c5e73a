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

struct lb_vm {
    lua_State *L;
    int strict;
    int swift_depth;            /* > 0 while a Swift host function runs (strict mode) */
    lb_host_fn host;
    void *host_ctx;
    /* memory */
    size_t mem_used;
    size_t mem_limit;           /* 0 = unlimited */
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
    int ref_proxy_mt;           /* metatable of the module _ENV proxy */
    int ref_modglobals;         /* globals assigned during loading */
    int ref_calltab_mt;         /* metatable of each call's globals table */
    int ref_base;               /* read-only base table */
    int ref_msgh;               /* the VM's message handler */
    int ref_proxy;              /* the module _ENV proxy (userdata) */
    int ref_callstack;          /* array of the per-call globals tables in use */
    int ref_namespaces;         /* ns name -> hidden table behind its locked proxy */
    int callstack_n;
    lb_buf scratch;             /* JSON encoding scratch (transient; copied out at once) */
};

struct lb_out {
    int type;
    int boolean;
    int64_t integer;
    double number;
    char *buf;
    size_t len;
    int32_t code;
    int32_t kill;
};

/* registry keys (light userdata addresses) */
extern const char lb_key_array_mt;
extern const char lb_key_error_mt;
extern const char lb_key_lockmt;

lb_vm *lb_from(lua_State *L);
void lb_where(lua_State *L, int level, char *out, size_t cap);
void lb_kill(lua_State *L, lb_vm *vm, int reason);   /* raises */
void lb_arm_kill_hook(lua_State *L);
int lb_killed_or_mem(lua_State *L, int status);

int lb_run_protected(lb_vm *vm, lua_CFunction body, void *arg, lb_limits lim, lb_result *res);
void lb_set_env_target(lua_State *L, lb_vm *vm, int tindex);

/* sandbox (lb_sandbox.c) */
int lb_sandbox_open(lua_State *L);                   /* lua_CFunction, run in pcall */
void lb_push_locked(lua_State *L, int tindex);       /* pushes a locked userdata proxy of a table */
int lb_push_error_table(lua_State *L, lua_Integer code, const char *msg, size_t n);

/* json (lb_json.c) */
void lb_json_encode(lua_State *L, int idx, lb_buf *b);   /* appends; raises on bad values */
int lb_json_decode(lua_State *L, const char *s, size_t n);     /* pushes one value; raises */
int lb_json_lib(lua_State *L);                                 /* pushes the json table */
int lb_table_is_array(lua_State *L, int idx, lua_Integer *n);

/* patterns (lb_pattern.c) */
void lb_patterns_install(lua_State *L, int strtab);

#endif
