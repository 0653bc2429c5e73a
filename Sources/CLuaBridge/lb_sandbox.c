/*
 * lb_sandbox.c: THE allow list (Redis's script_lua.c). Mirrored in the Swift doc
 * comment of `LuaSandbox`. Everything a script can reach is built here, once per VM.
 *
 * Exposed globals (the read-only base behind every file's _ENV):
 *   assert error ipairs next pairs rawequal rawget rawlen rawset select tonumber tostring type
 *   getmetatable _VERSION
 *   pcall xpcall        C re-implementations that re-raise a tripped limit (cannot be swallowed)
 *   setmetatable        refuses metatables with __gc (finalizers would run outside any limit)
 *   load                text chunks only, env defaults to the caller's environment, never _G
 *   require             modules of functions/lib/ only ("lib.geo"), each loaded once per VM
 *   collectgarbage      "count" only
 *   string table math utf8   the standard libraries, as locked proxies
 *   os                  time clock date difftime only
 *   json cloud          json.encode/decode/null/array, cloud.error (+ host functions)
 *   print               registered by the host (lb_register with an empty namespace): the
 *                       server's log, never stdout
 * Removed, with the reason:
 *   io, dofile, loadfile, package            file system and native code
 *   debug                                    reaches upvalues, metatables and the registry
 *   coroutine                                yields across our C pcall; not supported
 *   string.dump                              binary chunks
 *   os.execute/exit/getenv/remove/rename/tmpname/setlocale   the process and its environment
 *   _G                                       the real global table is never reachable
 * Libraries and namespaces are userdata proxies (`__index` = hidden table, `__newindex` raises,
 * `__metatable` = false): assignment and rawset cannot change them for a later call. The string
 * metatable has `__metatable = false`. Pattern functions are bounded (lb_pattern.c), and so are
 * string.rep, table.insert/remove/move/sort (lb_stdlib.c, which lists the whole audit).
 */
#include "lb_internal.h"
#include <string.h>

static const char *const base_allow[] = {
    "assert", "error", "ipairs", "next", "pairs", "rawequal", "rawget", "rawlen", "rawset",
    "select", "tonumber", "tostring", "type", "getmetatable", "_VERSION", NULL,
};
static const char *const os_allow[] = {"time", "clock", "date", "difftime", NULL};

/* ---------------------------------------------------------------- locked proxies */

static int locked_newindex(lua_State *L) {
    return luaL_error(L, "attempt to modify a read-only table");
}

void lb_push_locked(lua_State *L, int tindex) {
    tindex = lua_absindex(L, tindex);
    lua_newuserdatauv(L, 0, 0);
    lua_createtable(L, 0, 3);
    lua_pushvalue(L, tindex);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, locked_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
}

/* ---------------------------------------------------------------- replaced base functions */

/* pcall with a continuation (as Lua's own), so a call attempted on an I/O thread can still
 * yield inside it (to finish on a worker). */
static int sb_finish_pcall(lua_State *L, int st, lua_KContext extra) {
    if (st != LUA_OK && st != LUA_YIELD) {
        if (lb_killed_or_mem(L, st)) return lua_error(L);
        lua_pushboolean(L, 0);
        lua_pushvalue(L, -2);
        return 2;
    }
    return lua_gettop(L) - (int)extra;
}

static int sb_pcall(lua_State *L) {
    luaL_checkany(L, 1);
    lua_pushboolean(L, 1);
    lua_insert(L, 1);
    int st = lua_pcallk(L, lua_gettop(L) - 2, LUA_MULTRET, 0, 0, sb_finish_pcall);
    return sb_finish_pcall(L, st, 0);
}

/* The message handler xpcall installs: a kill is raised from inside a hook, where hooks are
 * off, so the script's handler must not run then (it could spin forever unkillable). */
static int xpcall_handler(lua_State *L) {
    if (lb_from(L)->killed) return 1;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

static int sb_xpcall(lua_State *L) {
    int n = lua_gettop(L);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, xpcall_handler, 1);
    lua_replace(L, 2);
    lua_pushvalue(L, 1);
    lua_copy(L, 2, 1);
    lua_replace(L, 2);           /* [handler, f, args...] */
    int st = lua_pcall(L, n - 2, LUA_MULTRET, 1);
    if (st != LUA_OK && lb_killed_or_mem(L, st)) return lua_error(L);
    lua_pushboolean(L, st == LUA_OK);
    lua_replace(L, 1);
    return lua_gettop(L);
}

static int sb_setmetatable(lua_State *L) {
    int t = lua_type(L, 2);
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
    if (t == LUA_TTABLE) {
        lua_pushliteral(L, "__gc");
        if (lua_rawget(L, 2) != LUA_TNIL) return luaL_error(L, "__gc metamethods are not allowed");
        lua_pop(L, 1);
    }
    if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
        return luaL_error(L, "cannot change a protected metatable");
    lua_settop(L, 2);
    lua_setmetatable(L, 1);
    return 1;
}

/* The _ENV of the Lua function calling a C function (its upvalue named _ENV), else a proxy with
 * module globals of its own: a loaded chunk sees what its caller sees, never the real globals. */
static void push_caller_env(lua_State *L, lb_vm *vm) {
    lua_Debug ar;
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "f", &ar)) {
        for (int i = 1;; i++) {
            const char *n = lua_getupvalue(L, -1, i);
            if (!n) break;
            if (strcmp(n, "_ENV") == 0) { lua_remove(L, -2); return; }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_proxy);
}

static int sb_load(lua_State *L) {
    lb_vm *vm = lb_from(L);
    if (lua_type(L, 1) != LUA_TSTRING) {
        luaL_pushfail(L);
        lua_pushliteral(L, "load: only text chunks given as strings are allowed");
        return 2;
    }
    size_t n;
    const char *s = lua_tolstring(L, 1, &n);
    const char *name = luaL_optstring(L, 2, "=(load)");
    const char *mode = luaL_optstring(L, 3, "t");
    if (strchr(mode, 'b') || !strchr(mode, 't')) {
        luaL_pushfail(L);
        lua_pushliteral(L, "load: binary chunks are not allowed");
        return 2;
    }
    int has_env = !lua_isnone(L, 4);
    int st = luaL_loadbufferx(L, s, n, name, "t");
    if (st != LUA_OK) {
        if (st == LUA_ERRMEM && lb_killed_or_mem(L, st)) return lua_error(L);
        luaL_pushfail(L);
        lua_insert(L, -2);
        return 2;
    }
    if (has_env) lua_pushvalue(L, 4);
    else push_caller_env(L, vm);
    if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
    return 1;
}

static int sb_collectgarbage(lua_State *L) {
    const char *opt = luaL_optstring(L, 1, "collect");
    if (strcmp(opt, "count") != 0) return luaL_error(L, "collectgarbage: only \"count\" is allowed");
    int k = lua_gc(L, LUA_GCCOUNT, 0);
    int b = lua_gc(L, LUA_GCCOUNTB, 0);
    lua_pushnumber(L, (lua_Number)k + ((lua_Number)b / 1024));
    return 1;
}

/* ---------------------------------------------------------------- cloud.error */

static int error_tostring(lua_State *L) {
    lua_getfield(L, 1, "message");
    lua_getfield(L, 1, "code");
    lua_pushfstring(L, "%s (code %s)", luaL_optstring(L, -2, "?"), luaL_optstring(L, -1, "?"));
    return 1;
}

int lb_push_error_table(lua_State *L, lua_Integer code, const char *msg, size_t n) {
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, code);
    lua_setfield(L, -2, "code");
    lua_pushlstring(L, msg, n);
    lua_setfield(L, -2, "message");
    lua_rawgetp(L, LUA_REGISTRYINDEX, &lb_key_error_mt);
    lua_setmetatable(L, -2);
    return 1;
}

/* cloud.error(code, message) raises {code=, message=}; the VM's handler turns it into that
 * ParseError (so cloud.error(101, "x") answers 404). `error(cloud.error(...))` also works. */
static int cloud_error(lua_State *L) {
    lua_Integer code = luaL_checkinteger(L, 1);
    size_t n;
    const char *msg = luaL_optlstring(L, 2, "", &n);
    if (code <= 0 || code >= 100000) return luaL_argerror(L, 1, "invalid error code");
    lb_push_error_table(L, code, msg, n);
    return lua_error(L);
}

/* ---------------------------------------------------------------- open */

static void open_lib(lua_State *L, const char *name, lua_CFunction f) {
    luaL_requiref(L, name, f, 0);
}

int lb_sandbox_open(lua_State *L) {
    lb_vm *vm = lb_from(L);
    lua_settop(L, 0);
    open_lib(L, "_G", luaopen_base);      /* 1: the real globals (never exposed) */
    open_lib(L, "string", luaopen_string);/* 2 */
    open_lib(L, "table", luaopen_table);  /* 3 */
    open_lib(L, "math", luaopen_math);    /* 4 */
    open_lib(L, "utf8", luaopen_utf8);    /* 5 */
    open_lib(L, "os", luaopen_os);        /* 6 */

    lua_newtable(L);                      /* 7: base */
    int base = 7;
    for (int i = 0; base_allow[i]; i++) {
        lua_getfield(L, 1, base_allow[i]);
        lua_setfield(L, base, base_allow[i]);
    }
    lua_pushcfunction(L, sb_pcall); lua_setfield(L, base, "pcall");
    lua_pushcfunction(L, sb_xpcall); lua_setfield(L, base, "xpcall");
    lua_pushcfunction(L, sb_setmetatable); lua_setfield(L, base, "setmetatable");
    lua_pushcfunction(L, sb_load); lua_setfield(L, base, "load");
    lua_pushcfunction(L, sb_collectgarbage); lua_setfield(L, base, "collectgarbage");
    lua_pushcfunction(L, lb_require); lua_setfield(L, base, "require");

    /* string: no dump, bounded patterns, locked metatable */
    lua_pushnil(L); lua_setfield(L, 2, "dump");
    lb_patterns_install(L, 2);
    lb_stdlib_install(L, 2, 3);
    lua_pushliteral(L, "");
    if (lua_getmetatable(L, -1)) {
        lua_pushboolean(L, 0);
        lua_setfield(L, -2, "__metatable");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lb_push_locked(L, 2); lua_setfield(L, base, "string");
    lb_push_locked(L, 3); lua_setfield(L, base, "table");
    lb_push_locked(L, 4); lua_setfield(L, base, "math");
    lb_push_locked(L, 5); lua_setfield(L, base, "utf8");
    lua_newtable(L);
    for (int i = 0; os_allow[i]; i++) {
        lua_getfield(L, 6, os_allow[i]);
        lua_setfield(L, -2, os_allow[i]);
    }
    lb_push_locked(L, -1); lua_setfield(L, base, "os");
    lua_pop(L, 1);

    /* error tables */
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, error_tostring); lua_setfield(L, -2, "__tostring");
    lua_pushboolean(L, 0); lua_setfield(L, -2, "__metatable");
    lua_rawsetp(L, LUA_REGISTRYINDEX, &lb_key_error_mt);

    /* namespaces extensible by the host: json, cloud */
    lua_newtable(L);
    int ns = lua_gettop(L);
    lb_json_lib(L);
    lua_pushvalue(L, -1); lua_setfield(L, ns, "json");
    lb_push_locked(L, -1); lua_setfield(L, base, "json");
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, cloud_error); lua_setfield(L, -2, "error");
    lua_pushvalue(L, -1); lua_setfield(L, ns, "cloud");
    lb_push_locked(L, -1); lua_setfield(L, base, "cloud");
    lua_pop(L, 1);
    vm->ref_namespaces = luaL_ref(L, LUA_REGISTRYINDEX);

    /* _ENV: each file and each module gets a proxy of its own (lb_push_file_env); the holder
     * names the running call's globals table. */
    lua_pushvalue(L, base);
    vm->ref_base = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_createtable(L, 1, 0);
    lua_pushboolean(L, 0);
    lua_rawseti(L, -2, 1);
    vm->ref_current = luaL_ref(L, LUA_REGISTRYINDEX);
    lb_push_file_env(L, vm);
    vm->ref_proxy = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    vm->ref_callstack = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    vm->ref_modsrc = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    vm->ref_loaded = luaL_ref(L, LUA_REGISTRYINDEX);

    /* The real globals table keeps nothing a script could use if it ever reached it. */
    lua_pushglobaltable(L);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_pushnil(L);
        lua_rawset(L, -4);
    }
    lua_pop(L, 1);
    lua_settop(L, 0);
    return 0;
}
