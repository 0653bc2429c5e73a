/*
 * lb_call.c: loading files, calling function references with per-call globals, the Lua→Swift
 * trampoline, host function registration and the host output setters.
 */
#include "lb_internal.h"
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

/* ---------------------------------------------------------------- module environment */

/* Every file's _ENV is a proxy (userdata) that reads the running call's globals, then the file's
 * own top-level globals, then the read-only base; it writes to the call's globals during a call
 * and to the file's globals while the file loads. Files therefore share nothing through globals:
 * shared code lives in modules (require). The holder table names the running call's globals. */
static int env_index(lua_State *L) {
    if (lua_rawgeti(L, lua_upvalueindex(1), 1) == LUA_TTABLE) {
        lua_pushvalue(L, 2);
        if (lua_rawget(L, -2) != LUA_TNIL) return 1;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(2)) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(3));
    return 1;
}

static int env_newindex(lua_State *L) {
    if (lua_rawgeti(L, lua_upvalueindex(1), 1) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_pushvalue(L, lua_upvalueindex(2));
    }
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_rawset(L, -3);
    return 0;
}

void lb_push_file_env(lua_State *L, lb_vm *vm) {
    lua_newuserdatauv(L, 0, 0);                          /* P */
    lua_createtable(L, 0, 3);                            /* P mt */
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_current);  /* P mt H */
    lua_newtable(L);                                     /* P mt H M: the file's globals */
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_base);     /* P mt H M B */
    lua_pushvalue(L, -3);
    lua_pushvalue(L, -3);
    lua_pushcclosure(L, env_newindex, 2);
    lua_setfield(L, -5, "__newindex");                   /* P mt H M B */
    lua_pushcclosure(L, env_index, 3);                   /* P mt index */
    lua_setfield(L, -2, "__index");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);                             /* P */
}

/* Makes the value at `tindex` (a call's globals table, or false) the running call's globals.
 * Slot 1 of the holder exists from the start, so this rawseti never allocates. */
void lb_set_env_target(lua_State *L, lb_vm *vm, int tindex) {
    tindex = lua_absindex(L, tindex);
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_current);
    lua_pushvalue(L, tindex);
    lua_rawseti(L, -2, 1);
    lua_pop(L, 1);
}

static void push_current_target(lua_State *L, lb_vm *vm) {
    if (vm->callstack_n > 0) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_callstack);
        lua_rawgeti(L, -1, vm->callstack_n);
        lua_remove(L, -2);
    } else {
        lua_pushboolean(L, 0);
    }
}

static void push_call_globals(lua_State *L, lb_vm *vm) {
    lua_createtable(L, 0, 0);
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_callstack);
    lua_pushvalue(L, -2);
    lua_rawseti(L, -2, vm->callstack_n + 1);
    lua_pop(L, 1);
    vm->callstack_n++;
    lb_set_env_target(L, vm, -1);
    lua_pop(L, 1);
}

static void pop_call_globals(lua_State *L, lb_vm *vm, int to_n) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_callstack);
    while (vm->callstack_n > to_n) {
        lua_pushnil(L);
        lua_rawseti(L, -2, vm->callstack_n);
        vm->callstack_n--;
    }
    lua_pop(L, 1);
    push_current_target(L, vm);
    lb_set_env_target(L, vm, -1);
    lua_pop(L, 1);
}

typedef struct { lb_vm *vm; int to_n; } restore_args;
static int restore_body(lua_State *L) {
    restore_args *a = lua_touserdata(L, 1);
    pop_call_globals(L, a->vm, a->to_n);
    return 0;
}

/* ---------------------------------------------------------------- results */

static void copy_scratch(lb_vm *vm, lb_result *res) {
    res->json = malloc(vm->scratch.n + 1);
    if (!res->json) return;
    memcpy(res->json, vm->scratch.p, vm->scratch.n);
    res->json[vm->scratch.n] = 0;
    res->json_len = vm->scratch.n;
}

static void encode_result(lua_State *L, lb_vm *vm, int idx, lb_result *res) {
    vm->scratch.n = 0;
    vm->scratch_limit = vm->max_result > 0 ? (size_t)vm->max_result : 0;
    vm->top_members = 0;
    lb_json_encode(L, idx, &vm->scratch);
    vm->scratch_limit = 0;
    res->members = vm->top_members;   /* (0 unless the result is an object: see enc_table) */
    res->json_member_off = vm->top_json_off;
    res->json_member_len = vm->top_json_len;
    copy_scratch(vm, res);
    if (!res->json) luaL_error(L, "not enough memory for the result");
}

/* ---------------------------------------------------------------- load */

typedef struct { const char *name; const char *src; size_t len; lb_result *res; } load_args;

static int load_body(lua_State *L) {
    load_args *a = lua_touserdata(L, 1);
    lb_vm *vm = lb_from(L);
    lua_settop(L, 0);
    /* Text chunks only: the manual warns that crafted binary chunks can crash the VM. */
    if (luaL_loadbufferx(L, a->src, a->len, a->name, "t") != LUA_OK) lua_error(L);
    lb_push_file_env(L, vm);
    if (!lua_setupvalue(L, 1, 1)) lua_pop(L, 1);   /* a fresh chunk: no closure shares the upvalue */
    pop_call_globals(L, vm, 0);                      /* top-level globals belong to this file */
    lua_call(L, 0, 0);
    return 0;
}

int lb_load(lb_vm *vm, const char *chunkname, const char *src, size_t len, lb_limits limits, lb_result *res) {
    load_args a = {chunkname, src, len, res};
    if (vm->depth == 0) vm->over_vm_limit = 0;   /* (not in the restore call below) */
    int saved = vm->callstack_n;
    int st = lb_run_protected(vm, load_body, &a, limits, res);
    if (vm->callstack_n != saved || st != LB_OK) {
        restore_args r = {vm, saved};
        lb_result tmp;
        lb_run_protected(vm, restore_body, &r, (lb_limits){0, 0, 0, 0, 0}, &tmp);
        lb_result_free(&tmp);
    }
    return st;
}

/* ---------------------------------------------------------------- call */

typedef struct {
    int32_t ref; const char *args; size_t alen;
    const lb_extra *ex; int nex; int mode; const char *field; lb_result *res; int fresh;
    int64_t attempt_ns;
} call_args;

static int lb_trampoline(lua_State *L);

/* ---------------------------------------------------------------- attempts on a coroutine */

/* The VM's call coroutine: reused while it finishes cleanly, replaced after an error. */
static lua_State *call_thread(lua_State *L, lb_vm *vm) {
    if (vm->co_ref) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, vm->co_ref);
        lua_State *co = lua_tothread(L, -1);
        lua_pop(L, 1);
        if (co && lua_status(co) == LUA_OK && lua_gettop(co) == 0) return co;
        luaL_unref(L, LUA_REGISTRYINDEX, vm->co_ref);
        vm->co_ref = 0;
    }
    lua_State *co = lua_newthread(L);
    vm->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return co;
}

static void drop_thread(lua_State *L, lb_vm *vm) {
    if (vm->co_ref) luaL_unref(L, LUA_REGISTRYINDEX, vm->co_ref);
    vm->co_ref = 0;
}

/* Resumes `co` with `nargs` values on its stack (the function first when it starts). */
static int run_thread(lua_State *L, lb_vm *vm, lua_State *co, int nargs, int attempt, int *nres) {
    vm->attempting = attempt;
    lb_set_call_hook(vm, co);
    vm->cur = co;
    int st = lua_resume(co, L, nargs, nres);
    vm->cur = NULL;
    vm->attempting = 0;
    return st;
}

/* After the coroutine returned or failed: its first result replaces index 2 of L; an error is
 * re-raised on L with the place it was raised (a kill or memory error stays one). */
static void settle_thread(lua_State *L, lb_vm *vm, lua_State *co, int st, int nres) {
    if (st == LUA_OK) {
        if (nres > 0) {
            lua_settop(co, lua_gettop(co) - nres + 1);
            lua_xmove(co, L, 1);
        } else {
            lua_pushnil(L);
        }
        lua_settop(co, 0);
        lua_replace(L, 2);
        return;
    }
    if (st == LUA_ERRMEM && !vm->killed) vm->killed = LB_KILL_MEMORY;
    if (!vm->killed) {
        lb_where(co, 0, vm->err_where, sizeof vm->err_where);
        vm->where_fixed = 1;
    }
    if (lua_gettop(co) > 0) lua_xmove(co, L, 1);
    else lua_pushliteral(L, "error");
    drop_thread(L, vm);
    if (vm->killed) lb_arm_kill_hook(L);
    lua_error(L);
}

/* ---------------------------------------------------------------- argument tapes */

/* A call's arguments as the host writes them (`LuaArgs` in Swift): a u32 count, then that many
 * values, each one tag byte and its payload:
 *   'S' u32 len, bytes     a string (raw bytes: request bodies need not be UTF-8)
 *   'T' / 'F'              true / false
 *   'J' u32 len, JSON text a value decoded by lb_json_decode (params, objects, users)
 *   'O' u32 n, n pairs     a table; each pair is u32 len, key bytes, then a value
 * u32s are in the host's byte order (both ends are this process). The fixed parts of `req`
 * (method, headers, query, path parameters, ip) were JSON text that the host wrote with escaping
 * and the bridge tokenized again, and the argument list was one more table: about 11,000 of a
 * Lua route hello's 111,000 instructions (callgrind). A tape is copied, not scanned. Only the
 * host writes tapes, but every read is bounds-checked and a malformed tape raises. */
typedef struct { const uint8_t *p, *end; } tape_rd;

static uint32_t tape_u32(lua_State *L, tape_rd *r) {
    if (r->end - r->p < 4) luaL_error(L, "malformed call arguments");
    uint32_t v;
    memcpy(&v, r->p, 4);
    r->p += 4;
    return v;
}

static const char *tape_bytes(lua_State *L, tape_rd *r, uint32_t n) {
    if ((size_t)(r->end - r->p) < n) luaL_error(L, "malformed call arguments");
    const char *s = (const char *)r->p;
    r->p += n;
    return s;
}

/* Tables nest in `req` at most two deep (req.headers); JSON values carry their own limit. */
#define TAPE_MAX_DEPTH 4

static void tape_value(lua_State *L, tape_rd *r, int depth) {
    if (r->p >= r->end || depth > TAPE_MAX_DEPTH) luaL_error(L, "malformed call arguments");
    uint8_t tag = *r->p++;
    switch (tag) {
    case 'S': {
        uint32_t n = tape_u32(L, r);
        const char *s = tape_bytes(L, r, n);
        lua_pushlstring(L, s, n);
        return;
    }
    case 'T': lua_pushboolean(L, 1); return;
    case 'F': lua_pushboolean(L, 0); return;
    case 'J': {
        uint32_t n = tape_u32(L, r);
        const char *s = tape_bytes(L, r, n);
        lb_json_decode(L, s, n);
        return;
    }
    case 'O': {
        uint32_t n = tape_u32(L, r);
        luaL_checkstack(L, 3, "call arguments");
        lua_createtable(L, 0, (int)(n < 64 ? n : 64));
        for (uint32_t i = 0; i < n; i++) {
            uint32_t kl = tape_u32(L, r);
            const char *k = tape_bytes(L, r, kl);
            lua_pushlstring(L, k, kl);
            tape_value(L, r, depth + 1);
            lua_rawset(L, -3);
        }
        return;
    }
    default: luaL_error(L, "malformed call arguments");
    }
}

/* Pushes the tape's values; returns how many. */
static int tape_push_args(lua_State *L, const char *args, size_t len) {
    tape_rd r = {(const uint8_t *)args, (const uint8_t *)args + len};
    uint32_t n = tape_u32(L, &r);
    if (n > 200) luaL_error(L, "too many arguments");
    luaL_checkstack(L, (int)n + 4, "too many arguments");
    for (uint32_t i = 0; i < n; i++) tape_value(L, &r, 0);
    if (r.p != r.end) luaL_error(L, "malformed call arguments");
    return (int)n;
}

static int call_body(lua_State *L) {
    call_args *a = lua_touserdata(L, 1);
    lb_vm *vm = lb_from(L);
    lua_settop(L, 0);
    lua_pushnil(L);                                   /* 1: copy of the first argument */
    lua_rawgeti(L, LUA_REGISTRYINDEX, a->ref);        /* 2: the function */
    if (lua_type(L, 2) != LUA_TFUNCTION) luaL_error(L, "invalid function reference");
    int nargs = a->alen ? tape_push_args(L, a->args, a->alen) : 0;
    if (nargs >= 1 && lua_type(L, 3) == LUA_TTABLE) {
        for (int i = 0; i < a->nex; i++) {
            lua_pushstring(L, a->ex[i].key);
            if (a->ex[i].fnid >= 0) {
                lua_pushinteger(L, a->ex[i].fnid);
                lua_pushcclosure(L, lb_trampoline, 1);
            } else {
                lua_pushlstring(L, a->ex[i].bytes, a->ex[i].len);
            }
            lua_rawset(L, 3);
        }
        lua_pushvalue(L, 3);
        lua_replace(L, 1);
    }
    /* Globals assigned during the call land in a fresh table that is dropped afterwards. */
    if (a->fresh) push_call_globals(L, vm);
    if (a->attempt_ns > 0) {
        /* On the coroutine, which yields when the budget runs out or at a host function that
         * must not run here; the call is then finished by lb_resume_call. */
        lua_State *co = call_thread(L, vm);
        if (!lua_checkstack(co, nargs + 1)) luaL_error(L, "too many arguments");
        lua_pushvalue(L, 2);
        for (int i = 0; i < nargs; i++) lua_pushvalue(L, 3 + i);
        lua_xmove(L, co, nargs + 1);
        lua_settop(L, 2);
        vm->attempt_deadline = lb_now_ns() + a->attempt_ns;
        vm->attempt_stuck = 0;
        int nres = 0;
        int st = run_thread(L, vm, co, nargs, 1, &nres);
        if (st == LUA_YIELD) {   /* (no values yielded: the coroutine's stack is its frames) */
            lua_pushvalue(L, 1);
            vm->susp_arg_ref = luaL_ref(L, LUA_REGISTRYINDEX);
            vm->suspended = 1;
            return 0;
        }
        settle_thread(L, vm, co, st, nres);
    } else {
        lua_call(L, nargs, 1);                        /* result at 2 */
    }
    if (a->fresh) pop_call_globals(L, vm, vm->callstack_n - 1);
    if (a->mode == LB_RESULT_FIELD || (a->mode == LB_RESULT_RETURN_OR_FIELD && lua_isnil(L, 2))) {
        if (lua_type(L, 1) == LUA_TTABLE) lua_getfield(L, 1, a->field);
        else lua_pushnil(L);
        lua_replace(L, 2);
    }
    encode_result(L, vm, 2, a->res);
    return 0;
}

int lb_call(lb_vm *vm, int32_t ref, const char *args, size_t args_len,
            const lb_extra *extras, int nextras, int32_t result_mode, const char *result_field,
            lb_limits limits, lb_result *res) {
    int fresh = !(result_mode & LB_RESULT_SHARED_GLOBALS);
    int64_t attempt = vm->depth == 0 && !vm->suspended && fresh && (result_mode & 0xF) == LB_RESULT_RETURN
        ? limits.attempt_ns : 0;
    call_args a = {ref, args, args_len, extras, nextras, result_mode & 0xF, result_field, res, fresh, attempt};
    if (vm->depth == 0) vm->over_vm_limit = 0;   /* (not in the restore call below) */
    int saved = vm->callstack_n;
    int st = lb_run_protected(vm, call_body, &a, limits, res);
    if (vm->suspended && st == LB_OK) {
        vm->susp_base_n = saved;
        res->status = LB_SUSPENDED;
        return LB_SUSPENDED;
    }
    if (vm->callstack_n != saved) {
        restore_args r = {vm, saved};
        lb_result tmp;
        lb_run_protected(vm, restore_body, &r, (lb_limits){0, 0, 0, 0, 0}, &tmp);
        lb_result_free(&tmp);
    }
    return st;
}

/* ---------------------------------------------------------------- resume / discard */

static int resume_body(lua_State *L) {
    lb_result *res = lua_touserdata(L, 1);
    lb_vm *vm = lb_from(L);
    lua_settop(L, 0);
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->susp_arg_ref);   /* 1: the first argument */
    lua_pushnil(L);                                         /* 2: the result */
    luaL_unref(L, LUA_REGISTRYINDEX, vm->susp_arg_ref);
    vm->susp_arg_ref = 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->co_ref);
    lua_State *co = lua_tothread(L, -1);
    lua_pop(L, 1);
    if (!co) luaL_error(L, "no suspended call");
    int nres = 0;
    int st = run_thread(L, vm, co, 0, 0, &nres);
    if (st == LUA_YIELD) {
        drop_thread(L, vm);
        luaL_error(L, "unexpected yield");
    }
    settle_thread(L, vm, co, st, nres);
    pop_call_globals(L, vm, vm->callstack_n - 1);
    encode_result(L, vm, 2, res);
    return 0;
}

int lb_resume_call(lb_vm *vm, lb_result *res) {
    if (!vm->suspended || vm->depth != 0) {
        memset(res, 0, sizeof *res);
        res->status = LB_ERROR;
        res->code = 1;
        res->message = strdup("no suspended call to resume");
        res->message_len = res->message ? strlen(res->message) : 0;
        return LB_ERROR;
    }
    int base = vm->susp_base_n;
    vm->suspended = 0;
    vm->resuming = 1;
    int st = lb_run_protected(vm, resume_body, res, (lb_limits){0, 0, 0, 0, 0, 0}, res);
    vm->resuming = 0;
    if (vm->callstack_n != base) {
        restore_args r = {vm, base};
        lb_result tmp;
        lb_run_protected(vm, restore_body, &r, (lb_limits){0, 0, 0, 0, 0, 0}, &tmp);
        lb_result_free(&tmp);
    }
    return st;
}

static int discard_body(lua_State *L) {
    lb_vm *vm = lb_from(L);
    pop_call_globals(L, vm, vm->susp_base_n);
    if (vm->susp_arg_ref) luaL_unref(L, LUA_REGISTRYINDEX, vm->susp_arg_ref);
    vm->susp_arg_ref = 0;
    drop_thread(L, vm);
    return 0;
}

void lb_discard_suspended(lb_vm *vm) {
    if (!vm->suspended || vm->depth != 0) return;
    vm->suspended = 0;
    vm->resuming = 1;
    lb_result tmp;
    lb_run_protected(vm, discard_body, NULL, (lb_limits){0, 0, 0, 0, 0, 0}, &tmp);
    lb_result_free(&tmp);
    vm->resuming = 0;
}

/* ---------------------------------------------------------------- trampoline */

#define LB_MAX_ARGS 16

/* Lua → Swift. Arguments are read with non-raising calls (flat tables of scalars written as an
 * LB_FLAT tape on the C stack, other tables JSON-encoded and kept on the Lua stack, functions
 * referenced), Swift runs with the strict allocator armed, and only after
 * it returned does C push the answer or raise. */
static int host_call(lua_State *L);

static int host_call_k(lua_State *L, int status, lua_KContext ctx) {
    (void)status;
    (void)ctx;
    return host_call(L);
}

static int lb_trampoline(lua_State *L) {
    lb_vm *vm = lb_from(L);
    if (vm->attempting && L == vm->cur) {
        /* During an attempt, a host function that may block or act outside the call (db.*,
         * http, log) runs only once the call has moved to a worker: yield now; the worker's
         * resume continues here (host_call_k) with the same arguments. Where Lua cannot yield
         * (inside our pcall, a comparator, a metamethod) it runs here. */
        int64_t id = lua_tointeger(L, lua_upvalueindex(1));
        int safe = id >= 0 && id < (int64_t)sizeof vm->inline_safe && vm->inline_safe[id];
        if (!safe && lua_isyieldable(L)) return lua_yieldk(L, 0, 0, host_call_k);
    }
    return host_call(L);
}

/* Sets t.className = tag on the table at the top of the stack unless it has that field. */
static void tag_one(lua_State *L, const char *tag, size_t tagn) {
    lua_pushliteral(L, "className");
    if (lua_rawget(L, -2) != LUA_TNIL) { lua_pop(L, 1); return; }
    lua_pop(L, 1);
    lua_pushliteral(L, "className");
    lua_pushlstring(L, tag, tagn);
    lua_rawset(L, -3);
}

/* Tags the value at the top of the stack as the host's LuaObjects.tagged does: an object gets
 * `className` unless it has one; an array (decoded arrays carry the array marker metatable) has
 * each of its elements tagged, at any depth; other values are left alone. The decoder bounds the
 * nesting (MAX_DEPTH), so the recursion is bounded too. */
static void tag_value(lua_State *L, const char *tag, size_t tagn) {
    if (!lua_istable(L, -1)) return;
    luaL_checkstack(L, 4, "tag");
    int is_array = 0;
    if (lua_getmetatable(L, -1)) {
        lua_rawgetp(L, LUA_REGISTRYINDEX, &lb_key_array_mt);
        is_array = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
    }
    if (!is_array) { tag_one(L, tag, tagn); return; }
    lua_Integer len = (lua_Integer)lua_rawlen(L, -1);
    for (lua_Integer k = 1; k <= len; k++) {
        lua_rawgeti(L, -1, k);
        tag_value(L, tag, tagn);
        lua_pop(L, 1);
    }
}

static int host_call(lua_State *L) {
    lb_vm *vm = lb_from(L);
    int64_t fnid = lua_tointeger(L, lua_upvalueindex(1));
    int n = lua_gettop(L);
    if (n > LB_MAX_ARGS) luaL_error(L, "too many arguments (at most %d)", LB_MAX_ARGS);
    luaL_checkstack(L, LB_MAX_ARGS + 8, "host call");
    lb_value args[LB_MAX_ARGS];
    memset(args, 0, sizeof args);
    char flat[1024];   /* the LB_FLAT tapes of this call's table arguments */
    size_t flat_used = 0;
    for (int i = 0; i < n; i++) {
        int idx = i + 1;
        lb_value *v = &args[i];
        v->ref = LUA_NOREF;
        switch (lua_type(L, idx)) {
        case LUA_TNIL: v->type = LB_NIL; break;
        case LUA_TBOOLEAN: v->type = LB_BOOL; v->boolean = lua_toboolean(L, idx); break;
        case LUA_TNUMBER:
            if (lua_isinteger(L, idx)) { v->type = LB_INT; v->integer = lua_tointeger(L, idx); }
            else { v->type = LB_NUM; v->number = lua_tonumber(L, idx); }
            break;
        case LUA_TSTRING: v->type = LB_STR; v->str = lua_tolstring(L, idx, &v->len); break;
        case LUA_TTABLE:
            if (lb_flat_encode(L, idx, flat, sizeof flat, &flat_used, v)) break;
            vm->scratch.n = 0;
            vm->scratch_limit = 0;
            lb_json_encode(L, idx, &vm->scratch);
            lua_pushlstring(L, vm->scratch.p ? vm->scratch.p : "", vm->scratch.n);   /* stays on the stack */
            v->type = LB_JSON;
            v->str = lua_tolstring(L, -1, &v->len);
            break;
        case LUA_TFUNCTION:
            lua_pushvalue(L, idx);
            v->type = LB_FUNC;
            v->ref = luaL_ref(L, LUA_REGISTRYINDEX);
            break;
        case LUA_TLIGHTUSERDATA:
            if (lua_touserdata(L, idx) == NULL) { v->type = LB_NULL; break; }
            /* fallthrough */
        default:
            v->type = LB_OTHER;
            v->str = luaL_typename(L, idx);
            v->len = strlen(v->str);
        }
    }
    struct lb_out out;
    memset(&out, 0, sizeof out);
    free(vm->pending);
    vm->pending = NULL;
    vm->swift_depth++;
    int rc = vm->host(vm->host_ctx, fnid, args, n, &out);
    vm->swift_depth--;
    /* From here on Swift has returned: raising is safe. */
    vm->pending = out.buf;   /* freed at the next host call or lb_close, even if we raise */
    for (int i = 0; i < n; i++)
        if (args[i].type == LB_FUNC && !args[i].keep) luaL_unref(L, LUA_REGISTRYINDEX, args[i].ref);
    if (vm->killed) lb_kill(L, vm, vm->killed);   /* a nested call tripped a limit */
    if (rc == -2) lb_kill(L, vm, out.kill ? out.kill : LB_KILL_DBOPS);
    if (rc < 0) {
        lb_push_error_table(L, out.code ? out.code : 141, out.buf ? out.buf : "", out.buf ? out.len : 0);
        return lua_error(L);
    }
    switch (out.type) {
    case LB_BOOL: lua_pushboolean(L, out.boolean); break;
    case LB_INT: lua_pushinteger(L, (lua_Integer)out.integer); break;
    case LB_NUM: lua_pushnumber(L, out.number); break;
    case LB_STR: lua_pushlstring(L, out.buf ? out.buf : "", out.len); break;
    case LB_JSON:
        lb_json_decode(L, out.buf ? out.buf : "null", out.buf ? out.len : 4);
        if (out.buf && out.tag_len) tag_value(L, out.buf + out.len + 1, out.tag_len);
        break;
    case LB_NULL: lua_pushlightuserdata(L, NULL); break;
    default: lua_pushnil(L);
    }
    return 1;
}

void lb_unref(lb_vm *vm, int32_t ref) {
    /* luaL_unref writes existing registry slots only: it does not allocate or raise. */
    if (ref >= 0) luaL_unref(vm->L, LUA_REGISTRYINDEX, ref);
}

/* ---------------------------------------------------------------- registration */

typedef struct { const char *ns; const char *name; int64_t fnid; } reg_args;

/* Pushes the hidden table of namespace `ns` (creating it and its locked proxy in the base, or in
 * its parent namespace for a dotted name such as "crypto.base64"). */
static void push_namespace(lua_State *L, lb_vm *vm, const char *ns) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_namespaces);
    if (lua_getfield(L, -1, ns) == LUA_TTABLE) { lua_remove(L, -2); return; }
    lua_pop(L, 1);
    const char *dot = strrchr(ns, '.');
    if (dot) {
        lua_pushlstring(L, ns, (size_t)(dot - ns));
        push_namespace(L, vm, lua_tostring(L, -1));        /* ... nss parentname parent */
        lua_remove(L, -2);
        if (lua_getfield(L, -1, dot + 1) != LUA_TNIL) luaL_error(L, "'%s' is already defined", ns);
        lua_pop(L, 1);
    } else {
        lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_base);
        if (lua_getfield(L, -1, ns) != LUA_TNIL) luaL_error(L, "'%s' is a built-in library", ns);
        lua_pop(L, 1);
    }
    /* ... nss owner(parent or base) */
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, -4, ns);
    lb_push_locked(L, -1);
    lua_setfield(L, -3, dot ? dot + 1 : ns);
    lua_remove(L, -2);
    lua_remove(L, -2);
}

static int register_body(lua_State *L) {
    reg_args *a = lua_touserdata(L, 1);
    lb_vm *vm = lb_from(L);
    lua_settop(L, 0);
    if (a->ns[0] == 0) {  /* empty namespace: a global of the read-only base (print) */
        lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_base);
        lua_pushinteger(L, a->fnid);
        lua_pushcclosure(L, lb_trampoline, 1);
        lua_setfield(L, -2, a->name);
        return 0;
    }
    push_namespace(L, vm, a->ns);
    lua_pushinteger(L, a->fnid);
    lua_pushcclosure(L, lb_trampoline, 1);
    lua_setfield(L, -2, a->name);
    return 0;
}

int lb_register(lb_vm *vm, const char *ns, const char *name, int64_t fnid) {
    reg_args a = {ns, name, fnid};
    lb_result res;
    int st = lb_run_protected(vm, register_body, &a, (lb_limits){0, 0, 0, 0, 0}, &res);
    lb_result_free(&res);
    return st == LB_OK ? 0 : -1;
}

/* ---------------------------------------------------------------- host outputs */

static void out_reset(lb_out *o) { free(o->buf); o->buf = NULL; o->len = 0; o->tag_len = 0; }

static void out_bytes(lb_out *o, const char *s, size_t n) {
    out_reset(o);
    o->buf = malloc(n + 1);
    if (!o->buf) { o->type = LB_NIL; return; }
    memcpy(o->buf, s, n);
    o->buf[n] = 0;
    o->len = n;
}

void lb_out_nil(lb_out *o) { out_reset(o); o->type = LB_NIL; }
void lb_out_bool(lb_out *o, int b) { out_reset(o); o->type = LB_BOOL; o->boolean = b; }
void lb_out_int(lb_out *o, int64_t v) { out_reset(o); o->type = LB_INT; o->integer = v; }
void lb_out_num(lb_out *o, double v) { out_reset(o); o->type = LB_NUM; o->number = v; }
void lb_out_str(lb_out *o, const char *s, size_t n) { out_bytes(o, s, n); o->type = LB_STR; }
void lb_out_json(lb_out *o, const char *s, size_t n) { out_bytes(o, s, n); o->type = LB_JSON; }
void lb_out_json_tagged(lb_out *o, const char *s, size_t n, const char *tag, size_t tagn) {
    /* One buffer: the text, its NUL, the tag, its NUL (freed together as vm->pending). */
    out_reset(o);
    o->type = LB_JSON;
    o->tag_len = 0;
    o->buf = malloc(n + tagn + 2);
    if (!o->buf) { o->type = LB_NIL; return; }
    memcpy(o->buf, s, n);
    o->buf[n] = 0;
    memcpy(o->buf + n + 1, tag, tagn);
    o->buf[n + 1 + tagn] = 0;
    o->len = n;
    o->tag_len = tagn;
}
int lb_out_error(lb_out *o, int32_t code, const char *msg, size_t n) {
    out_bytes(o, msg, n);
    o->code = code;
    return -1;
}
int lb_out_kill(lb_out *o, int32_t reason) { o->kill = reason; return -2; }

void lb_caller_where(lb_vm *vm, char *out, size_t cap) {
    /* Read-only (lua_getstack/lua_getinfo "Sl" neither allocate nor raise): safe during a host
     * callback. Level 0 is the trampoline; the first Lua frame above it is the caller. */
    lb_where(vm->cur ? vm->cur : vm->L, 0, out, cap);
}
