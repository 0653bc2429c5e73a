/*
 * lb_module.c: `require` for the modules of functions/lib/. The host hands every module's source
 * to the VM before the files load (lb_add_module); `require("lib.geo")` compiles
 * functions/lib/geo.lua on first use, runs its top level with an _ENV of its own and caches the
 * table it returns for the life of the VM (one generation). A module that requires a module
 * still loading is a cycle: an error naming both files.
 */
#include "lb_internal.h"
#include <stdio.h>
#include <string.h>

static const char lb_key_loading = 0;   /* marks a module whose top level is running */

/* "lib.geo" or "lib.geo.cells": "lib" then dot-separated parts of [A-Za-z0-9_]. */
static int valid_module_name(const char *s, size_t n) {
    if (n < 5 || n > 200 || strncmp(s, "lib.", 4) != 0) return 0;
    size_t part = 0;
    for (size_t i = 4; i < n; i++) {
        char c = s[i];
        if (c == '.') {
            if (part == 0) return 0;
            part = 0;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_') {
            part++;
        } else {
            return 0;
        }
    }
    return part > 0;
}

/* Pushes "lib/geo.lua" for "lib.geo". */
static void push_module_file(lua_State *L, const char *name) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (const char *p = name; *p; p++) luaL_addchar(&b, *p == '.' ? '/' : *p);
    luaL_addstring(&b, ".lua");
    luaL_pushresult(&b);
}

int lb_require(lua_State *L) {
    lb_vm *vm = lb_from(L);
    size_t n;
    const char *name = luaL_checklstring(L, 1, &n);
    if (!valid_module_name(name, n) || strlen(name) != n)
        return luaL_error(L, "require: '%s' is not a module name: modules live in functions/lib/ and are named "
                             "like \"lib.geo\" for functions/lib/geo.lua", name);
    lua_settop(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_loaded);       /* 2 */
    push_module_file(L, name);                               /* 3 */
    const char *file = lua_tostring(L, 3);
    lua_pushvalue(L, 1);
    int t = lua_rawget(L, 2);                                /* 4 */
    if (t == LUA_TLIGHTUSERDATA && lua_touserdata(L, 4) == (void *)&lb_key_loading) {
        char from[160];
        lb_where(L, 1, from, sizeof from);
        char *colon = strrchr(from, ':');
        if (colon) *colon = 0;
        return luaL_error(L, "require cycle: %s requires %s, which is still loading", from[0] ? from : "?", file);
    }
    if (t != LUA_TNIL) return 1;
    lua_pop(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_modsrc);       /* 4 */
    lua_pushvalue(L, 1);
    if (lua_rawget(L, 4) != LUA_TSTRING)                     /* 5 */
        return luaL_error(L, "require: module '%s' not found (no functions/%s)", name, file);
    size_t len;
    const char *src = lua_tolstring(L, 5, &len);
    lua_pushfstring(L, "@%s", file);                         /* 6 */
    if (luaL_loadbufferx(L, src, len, lua_tostring(L, 6), "t") != LUA_OK) return lua_error(L);   /* 7 */
    lb_push_file_env(L, vm);
    if (!lua_setupvalue(L, 7, 1)) lua_pop(L, 1);
    lua_pushvalue(L, 1);
    lua_pushlightuserdata(L, (void *)&lb_key_loading);
    lua_rawset(L, 2);
    /* The module's top level writes its own globals, even when required during a call. */
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_current);      /* 8 */
    lua_rawgeti(L, 8, 1);                                    /* 9: the call's globals (or false) */
    lua_pushboolean(L, 0);
    lb_set_env_target(L, vm, -1);
    lua_pop(L, 1);
    lua_pushvalue(L, 7);
    int st = lua_pcall(L, 0, 1, 0);                          /* 10: result or error */
    lb_set_env_target(L, vm, 9);
    if (st != LUA_OK) lb_killed_or_mem(L, st);   /* a tripped limit stays a kill when re-raised */
    if (st != LUA_OK || lua_type(L, 10) != LUA_TTABLE) {
        lua_pushvalue(L, 1);
        lua_pushnil(L);
        lua_rawset(L, 2);
        if (st != LUA_OK) return lua_error(L);
        return luaL_error(L, "%s must return a table (it returned %s)", file, luaL_typename(L, 10));
    }
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 10);
    lua_rawset(L, 2);
    return 1;
}

/* ---------------------------------------------------------------- host entry points */

typedef struct { const char *name; const char *src; size_t len; } add_args;

static int add_body(lua_State *L) {
    add_args *a = lua_touserdata(L, 1);
    lb_vm *vm = lb_from(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_modsrc);
    lua_pushlstring(L, a->src, a->len);
    lua_setfield(L, -2, a->name);
    return 0;
}

int lb_add_module(lb_vm *vm, const char *name, const char *src, size_t len) {
    add_args a = {name, src, len};
    lb_result res;
    int st = lb_run_protected(vm, add_body, &a, (lb_limits){0, 0, 0}, &res);
    lb_result_free(&res);
    return st == LB_OK ? 0 : -1;
}

static int require_body(lua_State *L) {
    const char *name = lua_touserdata(L, 1);
    lua_settop(L, 0);
    lua_pushcfunction(L, lb_require);
    lua_pushstring(L, name);
    lua_call(L, 1, 0);
    return 0;
}

int lb_require_module(lb_vm *vm, const char *name, lb_limits limits, lb_result *res) {
    return lb_run_protected(vm, require_body, (void *)name, limits, res);
}
