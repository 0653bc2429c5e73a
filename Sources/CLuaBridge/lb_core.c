/*
 * lb_core.c: the VM, its budgeted allocator, per-call limits (watchdog + SIGURG, count hook,
 * memory cap), the message handler, lb_load / lb_call and the Lua→Swift trampoline.
 *
 * Invariant: Lua code and every API call that can raise run inside lua_pcall of a C body
 * (lb_call/lb_load/lb_register) or inside a C function Lua called (trampoline, hooks). A Swift
 * frame is only ever live inside `vm->host(...)`, during which the strict allocator aborts if
 * Lua allocates.
 */
#define _GNU_SOURCE
#include "lb_internal.h"
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <malloc.h>

const char lb_key_array_mt = 0;
const char lb_key_error_mt = 0;
const char lb_key_lockmt = 0;

static _Thread_local lb_vm *tl_current;      /* the VM running a limited call on this thread */
static _Thread_local int tl_sig_unblocked;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t lb_now_ns(void) { return now_ns(); }

lb_vm *lb_from(lua_State *L) { return *(lb_vm **)lua_getextraspace(L); }

/* ---------------------------------------------------------------- allocator */

static void record_where_unprotected(lb_vm *vm) {
    /* Only called when refusing an allocation: nothing has moved, so the CallInfo chain is
     * consistent; lua_getstack/lua_getinfo("Sl") only read it. */
    if (vm->kill_where[0] || vm->depth == 0) return;
    lb_where(vm->cur ? vm->cur : vm->L, 0, vm->kill_where, sizeof vm->kill_where);
}

static void *lb_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    lb_vm *vm = ud;
    if (vm->strict && vm->swift_depth > 0) {
        fprintf(stderr, "luabridge: Lua allocated while a Swift frame was live\n");
        abort();
    }
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        vm->mem_used -= old;
        return NULL;
    }
    if (nsize > old && vm->mem_limit && vm->mem_used + (nsize - old) > vm->mem_limit) {
        if (vm->L) record_where_unprotected(vm);
        if (vm->mem_limit_is_vm) vm->mem_refused_vm = 1;
        return NULL;
    }
    void *p = realloc(ptr, nsize);
    if (!p) return NULL;
    vm->mem_used = vm->mem_used - old + nsize;
    if (vm->mem_used > vm->mem_peak) vm->mem_peak = vm->mem_used;
    return p;
}

/* ---------------------------------------------------------------- watchdog */

static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static lb_vm *wd_head;
static pthread_once_t wd_once = PTHREAD_ONCE_INIT;

static void on_sigurg(int sig) {
    (void)sig;
    int saved = errno;
    lb_vm *vm = tl_current;
    int reason = vm ? atomic_load(&vm->kill_req_reason) : 0;
    /* A writer hold that ended since the watchdog looked (the write committed) kills nothing. */
    if (vm && vm->depth > 0 &&
        atomic_load(&vm->kill_req_gen) == atomic_load(&vm->call_gen) &&
        (reason != LB_KILL_WRITER_HOLD || atomic_load(&vm->hold_deadline_ns) != 0)) {
        if (!vm->killed) vm->killed = reason;
        /* lua_sethook is documented as safe from a signal handler on the owning thread. The
         * call may be running on its coroutine: arm both (the main thread runs nested calls). */
        lb_arm_kill_hook(vm->L);
        lua_State *co = vm->cur;
        if (co) lb_arm_kill_hook(co);
    }
    errno = saved;
}

/* ---------------------------------------------------------------- returning memory */

/* glibc keeps freed memory in its arenas (one per thread that allocated): after a call that
 * allocated far above the norm, the process's private memory would stay at its peak. The
 * watchdog runs malloc_trim(0) 200 ms after a request, then 1.5 s and 5 s later (by then the
 * host has sent and freed its copies of a large result). */
static _Atomic int64_t trim_at;
static _Atomic int trim_round;
static const int64_t trim_delays_ms[] = {200, 1500, 5000};

void lb_request_trim(void) {
    atomic_store(&trim_round, 0);
    atomic_store(&trim_at, now_ns() + trim_delays_ms[0] * 1000000);
}

static void wd_trim(int64_t now) {
    int64_t at = atomic_load(&trim_at);
    if (!at || now < at) return;
    malloc_trim(0);
    int r = atomic_fetch_add(&trim_round, 1) + 1;
    if (r < (int)(sizeof trim_delays_ms / sizeof trim_delays_ms[0]))
        atomic_compare_exchange_strong(&trim_at, &at, now + (trim_delays_ms[r] - trim_delays_ms[r - 1]) * 1000000);
    else
        atomic_compare_exchange_strong(&trim_at, &at, 0);
}

static void *wd_loop(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 2 * 1000000};
        nanosleep(&ts, NULL);
        int64_t now = now_ns();
        wd_trim(now);
        pthread_mutex_lock(&wd_mu);
        for (lb_vm *vm = wd_head; vm; vm = vm->wd_next) {
            int64_t d = atomic_load(&vm->deadline_ns);
            int64_t h = atomic_load(&vm->hold_deadline_ns);
            int reason = LB_KILL_TIMEOUT;
            if (h && (!d || h < d)) { d = h; reason = LB_KILL_WRITER_HOLD; }
            if (!d || now < d) continue;
            atomic_store(&vm->kill_req_reason, reason);
            uint64_t g = atomic_load(&vm->call_gen);
            /* Signal once, then again every 50 ms while the call stays overdue (a signal that
             * landed while the thread ran host code still armed the hook; this is a backstop). */
            if (atomic_load(&vm->kill_req_gen) != g || now - vm->last_signal_ns > 50000000) {
                atomic_store(&vm->kill_req_gen, g);
                vm->last_signal_ns = now;
                pthread_kill(vm->owner, SIGURG);
            }
        }
        pthread_mutex_unlock(&wd_mu);
    }
    return NULL;
}

/* glibc adapts its mmap threshold upwards (to 32 MiB) after a large block is freed, and its
 * trim threshold with it: from then on blocks of a few MiB come from the worker threads'
 * arenas, and freed space at the top of a thread arena is given back neither by free() nor by
 * malloc_trim (which trims only the main arena's top). One 16 MiB Lua table per worker then
 * stays resident for good. Fixed thresholds keep blocks of 1 MiB and more in their own
 * mappings (unmapped when freed) and trim arena tops above 4 MiB. Set once, process-wide, with
 * the first VM: only Lua's large tables and strings and the host's large results reach them. */
static void malloc_policy(void) {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, 4 << 20);
}

static void wd_start(void) {
    malloc_policy();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigurg;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGURG, &sa, NULL);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    /* The watchdog itself must never take SIGURG. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_create(&t, &at, wd_loop, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&at);
}

static void wd_add(lb_vm *vm) {
    pthread_once(&wd_once, wd_start);
    pthread_mutex_lock(&wd_mu);
    vm->wd_next = wd_head;
    vm->wd_prev = NULL;
    if (wd_head) wd_head->wd_prev = vm;
    wd_head = vm;
    pthread_mutex_unlock(&wd_mu);
}

static void wd_remove(lb_vm *vm) {
    pthread_mutex_lock(&wd_mu);
    if (vm->wd_prev) vm->wd_prev->wd_next = vm->wd_next; else wd_head = vm->wd_next;
    if (vm->wd_next) vm->wd_next->wd_prev = vm->wd_prev;
    pthread_mutex_unlock(&wd_mu);
}

/* ---------------------------------------------------------------- hooks and kills */

void lb_where(lua_State *L, int level, char *out, size_t cap) {
    lua_Debug ar;
    out[0] = 0;
    for (int lv = level; lv < level + 40 && lua_getstack(L, lv, &ar); lv++) {
        if (!lua_getinfo(L, "Sl", &ar)) break;
        if (ar.currentline > 0) {
            snprintf(out, cap, "%s:%d", ar.short_src, ar.currentline);
            return;
        }
    }
}

static void lb_hook(lua_State *L, lua_Debug *ar) {
    lb_vm *vm = lb_from(L);
    if (!vm->killed && ar->event == LUA_HOOKCOUNT && vm->max_instructions > 0) {
        vm->instructions += 1000;
        if (vm->instructions > vm->max_instructions) vm->killed = LB_KILL_INSTRUCTIONS;
    }
    if (vm->killed) {
        if (!vm->kill_where[0]) lb_where(L, 0, vm->kill_where, sizeof vm->kill_where);
        lb_arm_kill_hook(L);
        lua_pushliteral(L, "killed");
        lua_error(L);
    }
    /* An attempt past its budget yields (only where Lua allows it: not inside a C function
     * such as our pcall, a sort comparator or a metamethod; it then tries again at the next
     * count) and is finished on a worker. */
    if (vm->attempting && ar->event == LUA_HOOKCOUNT && now_ns() >= vm->attempt_deadline) {
        if (L == vm->cur && lua_isyieldable(L)) {
            lua_yield(L, 0);
            return;
        }
        vm->attempt_stuck = 1;   /* running past the budget where it cannot yield */
    }
}

void lb_set_call_hook(lb_vm *vm, lua_State *co) {
    if (vm->killed) lb_arm_kill_hook(co);
    else if (vm->attempting || vm->max_instructions > 0) lua_sethook(co, lb_hook, LUA_MASKCOUNT, LB_HOOK_COUNT);
    else lua_sethook(co, NULL, 0, 0);
}

void lb_set_inline_safe(lb_vm *vm, int64_t fnid) {
    if (fnid >= 0 && fnid < (int64_t)sizeof vm->inline_safe) vm->inline_safe[fnid] = 1;
}

int lb_suspended(lb_vm *vm) { return vm->suspended; }
int lb_attempt_stuck(lb_vm *vm) { return vm->attempt_stuck; }

void lb_arm_kill_hook(lua_State *L) {
    lua_sethook(L, lb_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
}

void lb_kill(lua_State *L, lb_vm *vm, int reason) {
    if (!vm->killed) vm->killed = reason;
    if (!vm->kill_where[0]) lb_where(L, 1, vm->kill_where, sizeof vm->kill_where);
    lb_arm_kill_hook(L);
    lua_pushliteral(L, "killed");
    lua_error(L);
}

int lb_killed_or_mem(lua_State *L, int status) {
    lb_vm *vm = lb_from(L);
    if (status == LUA_ERRMEM && !vm->killed) {
        vm->killed = LB_KILL_MEMORY;
        lb_arm_kill_hook(L);
    }
    return vm->killed != 0;
}

/* ---------------------------------------------------------------- message handler */

static void set_error(lb_vm *vm, int32_t code, const char *msg, size_t n) {
    free(vm->err_msg);
    vm->err_msg = malloc(n + 1);
    if (vm->err_msg) { memcpy(vm->err_msg, msg, n); vm->err_msg[n] = 0; vm->err_len = n; }
    else vm->err_len = 0;
    vm->err_code = code;
}

/* Turns any raised value into code + message + file:line (Redis's errh_func). */
static int lb_msgh(lua_State *L) {
    lb_vm *vm = lb_from(L);
    if (vm->killed) return 1;
    /* An error re-raised from the call's coroutine carries the place it was raised there. */
    if (vm->where_fixed) vm->where_fixed = 0;
    else lb_where(L, 1, vm->err_where, sizeof vm->err_where);
    int t = lua_type(L, 1);
    if (t == LUA_TTABLE) {
        lua_pushliteral(L, "code");
        lua_rawget(L, 1);
        lua_pushliteral(L, "message");
        lua_rawget(L, 1);
        if (lua_isinteger(L, -2) && lua_type(L, -1) == LUA_TSTRING) {
            size_t n;
            const char *m = lua_tolstring(L, -1, &n);
            lua_Integer c = lua_tointeger(L, -2);
            set_error(vm, (c > 0 && c < 100000) ? (int32_t)c : 141, m, n);
            lua_pop(L, 2);
            return 1;
        }
        lua_pop(L, 2);
    }
    if (t == LUA_TSTRING) {
        size_t n;
        const char *m = lua_tolstring(L, 1, &n);
        set_error(vm, 141, m, n);
        return 1;
    }
    size_t n;
    const char *m;
    if (t == LUA_TNUMBER || luaL_getmetafield(L, 1, "__tostring") != LUA_TNIL) {
        if (t != LUA_TNUMBER) lua_pop(L, 1);
        m = luaL_tolstring(L, 1, &n);
    } else {
        m = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
        n = strlen(m);
    }
    set_error(vm, 141, m, n);
    lua_pop(L, 1);
    return 1;
}

/* ---------------------------------------------------------------- lifecycle */

typedef struct { lb_vm *vm; } new_args;

static int new_body(lua_State *L) {
    lb_vm *vm = lb_from(L);
    lua_pushcfunction(L, lb_sandbox_open);
    lua_call(L, 0, 0);
    lua_pushcfunction(L, lb_msgh);
    vm->ref_msgh = luaL_ref(L, LUA_REGISTRYINDEX);
    return 0;
}

lb_vm *lb_new(int strict, lb_host_fn host, void *host_ctx) {
    lb_vm *vm = calloc(1, sizeof *vm);
    if (!vm) return NULL;
    vm->strict = strict;
    vm->host = host;
    vm->host_ctx = host_ctx;
    lua_State *L = lua_newstate(lb_alloc, vm);
    if (!L) { free(vm); return NULL; }
    *(lb_vm **)lua_getextraspace(L) = vm;
    vm->L = L;
    lua_pushcfunction(L, new_body);
    if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
        lua_close(L);
        free(vm);
        return NULL;
    }
    lua_settop(L, 0);
    wd_add(vm);
    return vm;
}

void lb_close(lb_vm *vm) {
    if (!vm) return;
    wd_remove(vm);
    if (vm->mem_used > ((size_t)8 << 20)) lb_request_trim();
    lua_close(vm->L);
    free(vm->err_msg);
    free(vm->pending);
    free(vm->scratch.p);
    free(vm);
}

size_t lb_memory(lb_vm *vm) { return vm->mem_used; }

int64_t lb_call_remaining_ms(lb_vm *vm) {
    if (vm->killed) return 0;
    int64_t d = atomic_load(&vm->deadline_ns);
    if (!d) return -1;
    int64_t left = d - now_ns();
    return left <= 0 ? 0 : (left + 999999) / 1000000;
}

int lb_over_vm_limit(lb_vm *vm) { return vm->over_vm_limit; }
int lb_depth(lb_vm *vm) { return vm->depth; }
int lb_stack_top(lb_vm *vm) { return lua_gettop(vm->L); }

void lb_result_free(lb_result *res) {
    free(res->json);
    free(res->message);
    res->json = res->message = NULL;
}

/* ---------------------------------------------------------------- limits per call */

/* The watchdog signals `owner`; libdispatch threads (the Swift concurrency pool, so every
 * swift-testing test) block most signals, SIGURG included, so the thread unblocks it. */
static void own_thread(lb_vm *vm) {
    if (!tl_sig_unblocked) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGURG);
        pthread_sigmask(SIG_UNBLOCK, &s, NULL);
        tl_sig_unblocked = 1;
    }
    vm->owner = pthread_self();
}

void lb_hold_begin(lb_vm *vm, int64_t ms) {
    if (vm->hold_depth++ > 0 || ms <= 0) return;
    own_thread(vm);
    atomic_store(&vm->hold_deadline_ns, now_ns() + ms * 1000000);
}

void lb_hold_end(lb_vm *vm) {
    if (vm->hold_depth > 0 && --vm->hold_depth == 0) atomic_store(&vm->hold_deadline_ns, 0);
}

static void begin_limits(lb_vm *vm, lb_limits lim) {
    lua_State *L = vm->L;
    vm->killed = 0;
    vm->kill_where[0] = 0;
    vm->instructions = 0;
    vm->max_instructions = lim.max_instructions;
    atomic_fetch_add(&vm->call_gen, 1);
    if (lim.max_instructions > 0) lua_sethook(L, lb_hook, LUA_MASKCOUNT, LB_HOOK_COUNT);
    else lua_sethook(L, NULL, 0, 0);
    if (lim.max_memory > 0 && vm->mem_used > vm->mem_settled + (size_t)lim.max_memory / 4) {
        /* The budget is growth above the heap at call start. Garbage left by earlier calls is
         * part of that heap and, once collected during this call, would be room on top of the
         * budget: a call with a small maxMemoryMB after a call that allocated a lot could use
         * far more than its limit. Collect first whenever the heap grew by more than a quarter
         * of the budget since the last such collection (rare with the default budget). */
        lua_gc(L, LUA_GCCOLLECT, 0);
        vm->mem_settled = vm->mem_used;
    }
    size_t call_cap = lim.max_memory > 0 ? vm->mem_used + (size_t)lim.max_memory : 0;
    size_t vm_cap = lim.max_vm_memory > 0 ? (size_t)lim.max_vm_memory : 0;
    vm->mem_limit_is_vm = vm_cap && (!call_cap || vm_cap < call_cap);
    vm->mem_limit = vm->mem_limit_is_vm ? vm_cap : call_cap;
    vm->mem_refused_vm = 0;
    vm->mem_start = vm->mem_peak = vm->mem_used;
    vm->max_result = lim.max_result;
    vm->scratch_limit = 0;
    own_thread(vm);
    vm->prev_current = tl_current;
    tl_current = vm;
    int64_t h = atomic_load(&vm->hold_deadline_ns);
    if (h && now_ns() >= h) {
        /* The writer was held past its limit before this call began (a trigger fired late in a
         * long write): stop at the first instruction. */
        vm->killed = LB_KILL_WRITER_HOLD;
        lb_arm_kill_hook(L);
    }
    if (lim.timeout_ms > 0) atomic_store(&vm->deadline_ns, now_ns() + lim.timeout_ms * 1000000);
}

static void end_limits(lb_vm *vm, int status) {
    atomic_store(&vm->deadline_ns, 0);
    atomic_fetch_add(&vm->call_gen, 1);
    lua_sethook(vm->L, NULL, 0, 0);
    tl_current = vm->prev_current;
    vm->mem_limit = 0;
    vm->scratch_limit = 0;
    /* A call stopped by a limit, or one that allocated far above the norm: collect now and
     * give the memory back to the system rather than keep the peak until the next GC cycle. */
    int heavy = vm->mem_peak - vm->mem_start > LB_HEAVY_CALL_BYTES || vm->scratch.cap > LB_SCRATCH_KEEP;
    if (vm->killed || status == LUA_ERRMEM || heavy) {
        lua_gc(vm->L, LUA_GCCOLLECT, 0);
        if (vm->scratch.cap > LB_SCRATCH_KEEP) {
            free(vm->scratch.p);
            vm->mem_used -= vm->scratch.cap;
            vm->scratch.p = NULL;
            vm->scratch.n = vm->scratch.cap = 0;
        }
        lb_request_trim();
    }
    vm->killed = 0;
    vm->max_instructions = 0;
}

/* A suspended call keeps its limits (deadline, memory cap, counters) for the thread that
 * finishes it; this thread only stops being its owner. */
static void suspend_limits(lb_vm *vm) {
    tl_current = vm->prev_current;
}

/* The thread finishing a suspended call becomes its owner (the watchdog signals it). */
static void resume_limits(lb_vm *vm) {
    own_thread(vm);
    vm->prev_current = tl_current;
    tl_current = vm;
}

static void fill_failure(lb_vm *vm, int st, lb_result *res) {
    if (vm->killed || st == LUA_ERRMEM) {
        res->status = LB_KILLED;
        res->kill_reason = vm->killed ? vm->killed : LB_KILL_MEMORY;
        if (res->kill_reason == LB_KILL_MEMORY && vm->mem_refused_vm) res->kill_reason = LB_KILL_VM_MEMORY;
        if (res->kill_reason == LB_KILL_VM_MEMORY) vm->over_vm_limit = 1;
        res->code = 141;
        snprintf(res->where, sizeof res->where, "%s", vm->kill_where);
        return;
    }
    res->status = LB_ERROR;
    if (st == LUA_ERRERR) {
        res->code = 141;
        res->message = strdup("error in error handling");
        res->message_len = res->message ? strlen(res->message) : 0;
        res->where[0] = 0;
        return;
    }
    res->code = vm->err_code ? vm->err_code : 141;
    res->message = malloc(vm->err_len + 1);
    if (res->message) {
        memcpy(res->message, vm->err_msg ? vm->err_msg : "", vm->err_len);
        res->message[vm->err_len] = 0;
        res->message_len = vm->err_len;
    }
    snprintf(res->where, sizeof res->where, "%s", vm->err_where);
}

/* Runs `body` (with one light userdata argument) under the VM's message handler and limits. */
int lb_run_protected(lb_vm *vm, lua_CFunction body, void *arg, lb_limits lim, lb_result *res) {
    memset(res, 0, sizeof *res);
    int outer = vm->depth == 0;
    /* A nested call (from a host function) runs on the thread running the outer call: the
     * call coroutine when the outer call runs there, as any C function calling back into Lua. */
    lua_State *L = !outer && vm->cur ? vm->cur : vm->L;
    int saved_swift = vm->swift_depth;
    lua_State *saved_cur = vm->cur;
    int saved_attempting = vm->attempting;
    vm->swift_depth = 0;   /* a nested call's longjmps land in its own pcall, above the Swift frame */
    if (outer) vm->cur = NULL;
    vm->attempting = 0;    /* a nested call is never part of an attempt's yield points */
    /* A suspended call nobody finished is dropped before the VM runs anything else. */
    if (outer && vm->suspended && !vm->resuming) lb_discard_suspended(vm);
    if (outer) {
        if (vm->resuming) resume_limits(vm);
        else begin_limits(vm, lim);
    }
    vm->depth++;
    int top = lua_gettop(L);
    vm->err_code = 0;
    vm->err_where[0] = 0;
    vm->where_fixed = 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_msgh);
    lua_pushcfunction(L, body);
    lua_pushlightuserdata(L, arg);
    int st = lua_pcall(L, 1, 0, top + 1);
    vm->depth--;
    if (st == LUA_OK) res->status = LB_OK;
    else fill_failure(vm, st, res);
    lua_settop(L, top);
    if (outer) {
        if (vm->suspended) suspend_limits(vm);
        else end_limits(vm, st);
    }
    vm->swift_depth = saved_swift;
    vm->cur = saved_cur;
    vm->attempting = saved_attempting;
    return res->status;
}
