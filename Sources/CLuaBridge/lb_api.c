/* The names a Cloud Code script can reach: every global of the sandbox's base table and, for a
 * library or namespace (a locked proxy or a table), every field of it, as dotted names. Used by
 * `moonbase check --list-api` (editor setups, and the documentation check that keeps the docs
 * in step with what a VM really exposes). */
#include "lb_internal.h"
#include <stdlib.h>
#include <string.h>

typedef struct { char *out; size_t len; } api_args;

/* Adds "prefix.key\n" (or "key\n") to the buffer at index 1. */
static void add_name(lua_State *L, const char *prefix, const char *key) {
    lua_pushvalue(L, 1);
    if (prefix) lua_pushfstring(L, "%s%s.%s\n", lua_tostring(L, -1), prefix, key);
    else lua_pushfstring(L, "%s%s\n", lua_tostring(L, -1), key);
    lua_replace(L, 1);
    lua_pop(L, 1);
}

/* Pushes the table behind `idx`: a table as is, a locked proxy's __index table; else nil. */
static void push_fields(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) == LUA_TTABLE) { lua_pushvalue(L, idx); return; }
    if (lua_type(L, idx) == LUA_TUSERDATA && lua_getmetatable(L, idx)) {
        lua_getfield(L, -1, "__index");
        lua_remove(L, -2);
        if (lua_type(L, -1) == LUA_TTABLE) return;
        lua_pop(L, 1);
    }
    lua_pushnil(L);
}

static int api_body(lua_State *L) {
    api_args *a = lua_touserdata(L, 1);
    lb_vm *vm = lb_from(L);
    lua_settop(L, 0);
    lua_pushliteral(L, "");                                    /* 1: the text */
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_base);           /* 2: base */
    lua_pushnil(L);
    while (lua_next(L, 2)) {                                   /* 3: key, 4: value */
        if (lua_type(L, 3) == LUA_TSTRING) {
            const char *k = lua_tostring(L, 3);
            push_fields(L, 4);                                 /* 5 */
            if (lua_istable(L, 5)) {
                lua_pushnil(L);
                while (lua_next(L, 5)) {                       /* 6: field, 7: value */
                    if (lua_type(L, 6) == LUA_TSTRING) add_name(L, k, lua_tostring(L, 6));
                    lua_pop(L, 1);
                }
            } else {
                add_name(L, NULL, k);
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    size_t n;
    const char *s = lua_tolstring(L, 1, &n);
    a->out = malloc(n + 1);
    if (a->out) { memcpy(a->out, s, n); a->out[n] = 0; a->len = n; }
    return 0;
}

char *lb_api_names(lb_vm *vm, size_t *len) {
    api_args a = {NULL, 0};
    lb_result res;
    int st = lb_run_protected(vm, api_body, &a, (lb_limits){0, 0, 0}, &res);
    lb_result_free(&res);
    if (st != LB_OK) { free(a.out); return NULL; }
    *len = a.len;
    return a.out;
}

/* ---------------------------------------------------------------- cloud.codes */

/* `spec` is "NAME CODE\n" lines, from the host's one list of Parse error codes. */
static int codes_body(lua_State *L) {
    const char *p = lua_touserdata(L, 1);
    lb_vm *vm = lb_from(L);
    lua_settop(L, 0);
    lua_newtable(L);                                           /* 1: the codes */
    while (*p) {
        const char *sp = strchr(p, ' ');
        if (!sp) break;
        char *end;
        long code = strtol(sp + 1, &end, 10);
        lua_pushlstring(L, p, (size_t)(sp - p));
        lua_pushinteger(L, code);
        lua_rawset(L, 1);
        p = *end == '\n' ? end + 1 : end;
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->ref_namespaces);     /* 2 */
    lua_getfield(L, 2, "cloud");                               /* 3: the cloud table behind its proxy */
    lb_push_locked(L, 1);                                      /* read-only for scripts */
    lua_setfield(L, 3, "codes");
    return 0;
}

int lb_set_error_codes(lb_vm *vm, const char *spec) {
    lb_result res;
    int st = lb_run_protected(vm, codes_body, (void *)spec, (lb_limits){0}, &res);
    lb_result_free(&res);
    return st == LB_OK ? 0 : -1;
}
