/*
 * lb_json.c: JSON text <-> Lua values, in C (documents stay bytes until a script
 * needs them). Semantics: JSON null <-> json.null (a NULL light userdata, so null
 * members survive a round trip); arrays decode with a marker metatable so `[]` stays `[]`;
 * json.array(t) marks a table as an array; other empty tables encode as `{}`; integers stay
 * integers and floats keep a fraction ("3.0"); NaN/inf, cycles and non-UTF-8 strings raise.
 *
 * The byte-level work is CJSON's, shared with the REST layer: decoding walks the
 * token tape of cj_parse (validation, UTF-8 included) with cj_unescape/cj_number; encoding
 * uses cj_escape and cj_format_double. What is Lua-specific stays here.
 */
#include "lb_internal.h"
#include "cjson.h"
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define MAX_DEPTH 200
#define MAX_OUT ((size_t)256 << 20)

static int lb_utf8_valid(const char *s, size_t n) { return cj_utf8_valid((const uint8_t *)s, n); }

/* ---------------------------------------------------------------- buffer */

/* `b` is the VM's scratch buffer. Its capacity counts as VM memory: growing it past the call's
 * memory limit stops the call like any Lua allocation would, and a result (scratch_limit set by
 * lb_call) stops at the response cap, before the host copies and converts it. */
static void buf_reserve(lua_State *L, lb_buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return;
    lb_vm *vm = lb_from(L);
    if (vm->scratch_limit && b->n + extra > vm->scratch_limit) lb_kill(L, vm, LB_KILL_RESULT);
    if (b->n + extra > MAX_OUT) luaL_error(L, "JSON text too large");
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) cap *= 2;
    if (vm->mem_limit && vm->mem_used + (cap - b->cap) > vm->mem_limit) {
        if (vm->mem_limit_is_vm) vm->mem_refused_vm = 1;
        lb_kill(L, vm, vm->mem_limit_is_vm ? LB_KILL_VM_MEMORY : LB_KILL_MEMORY);
    }
    char *p = realloc(b->p, cap);
    if (!p) luaL_error(L, "not enough memory");
    vm->mem_used += cap - b->cap;
    if (vm->mem_used > vm->mem_peak) vm->mem_peak = vm->mem_used;
    b->p = p;
    b->cap = cap;
}
static void put(lua_State *L, lb_buf *b, const char *s, size_t n) {
    buf_reserve(L, b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void putc_(lua_State *L, lb_buf *b, char c) {
    buf_reserve(L, b, 1);
    b->p[b->n++] = c;
}

/* ---------------------------------------------------------------- encode */

static void enc_string(lua_State *L, lb_buf *b, const char *s, size_t n) {
    if (!lb_utf8_valid(s, n)) luaL_error(L, "cannot encode a string that is not valid UTF-8");
    /* Short strings reserve the worst case (6 bytes a byte); long ones measure first. */
    size_t need = n <= 256 ? 6 * n : cj_escape_len((const uint8_t *)s, n);
    buf_reserve(L, b, need + 2);
    b->p[b->n++] = '"';
    b->n += cj_escape((uint8_t *)b->p + b->n, (const uint8_t *)s, n);
    b->p[b->n++] = '"';
}

static void enc_number(lua_State *L, lb_buf *b, int idx) {
    char tmp[CJ_DOUBLE_MAX + 2];
    size_t len;
    if (lua_isinteger(L, idx)) {
        len = cj_format_int((int64_t)lua_tointeger(L, idx), tmp);
    } else {
        double d = lua_tonumber(L, idx);
        if (!isfinite(d)) luaL_error(L, "cannot encode a non-finite number");
        len = cj_format_double(d, tmp);
        /* A float stays a float when read back: "3.0", not "3". */
        if (!memchr(tmp, '.', len) && !memchr(tmp, 'e', len)) { tmp[len++] = '.'; tmp[len++] = '0'; }
    }
    put(L, b, tmp, len);
}

/* 1 and the length when the table encodes as an array. */
int lb_table_is_array(lua_State *L, int idx, lua_Integer *n) {
    idx = lua_absindex(L, idx);
    if (lua_getmetatable(L, idx)) {
        lua_rawgetp(L, LUA_REGISTRYINDEX, &lb_key_array_mt);
        int marked = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
        if (marked) { *n = (lua_Integer)lua_rawlen(L, idx); return 1; }
    }
    lua_Integer count = 0, max = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1) { lua_pop(L, 1); return 0; }
        lua_Integer k = lua_tointeger(L, -1);
        if (k > max) max = k;
        count++;
    }
    *n = max;
    return count > 0 && max == count;
}

static void enc_value(lua_State *L, lb_buf *b, int idx, int depth);

/* The LB_MEMBER_* bit of a top-level key a route's answer is made of, else 0. */
static uint32_t top_member(const char *k, size_t n) {
    switch (n) {
    case 4: return memcmp(k, "json", 4) == 0 ? LB_MEMBER_JSON : memcmp(k, "body", 4) == 0 ? LB_MEMBER_BODY : 0;
    case 6: return memcmp(k, "status", 6) == 0 ? LB_MEMBER_STATUS : 0;
    case 7: return memcmp(k, "headers", 7) == 0 ? LB_MEMBER_HEADERS : 0;
    default: return 0;
    }
}

static void enc_table(lua_State *L, lb_buf *b, int idx, int depth) {
    if (depth > MAX_DEPTH) luaL_error(L, "cannot encode: tables nested too deeply (a cycle?)");
    luaL_checkstack(L, 6, "json");
    lb_vm *vm = lb_from(L);
    if (vm->killed) lb_kill(L, vm, vm->killed);
    lua_Integer n;
    if (lb_table_is_array(L, idx, &n)) {
        putc_(L, b, '[');
        for (lua_Integer i = 1; i <= n; i++) {
            /* n may be a far border ({[1]=1,[2]=1,[4]=1,...}): a run of nulls no hook reaches. */
            if ((i & 4095) == 0) lb_tick(L, 4096);
            if (i > 1) putc_(L, b, ',');
            lua_rawgeti(L, idx, i);
            enc_value(L, b, lua_gettop(L), depth + 1);
            lua_pop(L, 1);
        }
        putc_(L, b, ']');
        return;
    }
    putc_(L, b, '{');
    int first = 1;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (!first) putc_(L, b, ',');
        first = 0;
        int kt = lua_type(L, -2);
        uint32_t member = 0;
        if (kt == LUA_TSTRING) {
            size_t kl;
            const char *k = lua_tolstring(L, -2, &kl);
            enc_string(L, b, k, kl);
            if (depth == 0) member = top_member(k, kl);
        } else if (kt == LUA_TNUMBER && lua_isinteger(L, -2)) {
            char tmp[24];
            size_t len = cj_format_int((int64_t)lua_tointeger(L, -2), tmp + 1);
            tmp[0] = '"';
            tmp[len + 1] = '"';
            put(L, b, tmp, len + 2);
        } else {
            luaL_error(L, "cannot encode a table key of type %s", luaL_typename(L, -2));
        }
        putc_(L, b, ':');
        size_t start = b->n;
        enc_value(L, b, lua_gettop(L), depth + 1);
        if (member) {
            vm->top_members |= member;
            if (member == LB_MEMBER_JSON) {
                vm->top_json_off = start;
                vm->top_json_len = b->n - start;
            }
        }
        lua_pop(L, 1);
    }
    putc_(L, b, '}');
}

static void enc_value(lua_State *L, lb_buf *b, int idx, int depth) {
    switch (lua_type(L, idx)) {
    case LUA_TNIL: put(L, b, "null", 4); break;
    case LUA_TBOOLEAN: if (lua_toboolean(L, idx)) put(L, b, "true", 4); else put(L, b, "false", 5); break;
    case LUA_TNUMBER: enc_number(L, b, idx); break;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        enc_string(L, b, s, n);
        break;
    }
    case LUA_TTABLE: enc_table(L, b, idx, depth); break;
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == NULL) { put(L, b, "null", 4); break; }
        /* fallthrough */
    default: luaL_error(L, "cannot encode a value of type %s", luaL_typename(L, idx));
    }
}

void lb_json_encode(lua_State *L, int idx, lb_buf *b) {
    enc_value(L, b, lua_absindex(L, idx), 0);
}

/* ---------------------------------------------------------------- flat tape */

/* The tape of LB_FLAT (luabridge.h). Host calls take small tables of scalars far more often than
 * anything else (`db.first("Post", {slug = s})`, `{master = true}`); as JSON they cost an encode
 * here, an interned Lua string to keep the text alive, and a parse in Swift: about 2,100
 * instructions for a one-member table, against ~500 for this tape. Anything the tape cannot say
 * exactly as the JSON text would (an array, a nested table, a metatable, a non-string key,
 * invalid UTF-8, NaN/inf) returns 0 and takes the JSON path, which also raises its errors. */
int lb_flat_encode(lua_State *L, int idx, char *buf, size_t cap, size_t *used, lb_value *v) {
    idx = lua_absindex(L, idx);
    if (lua_getmetatable(L, idx)) { lua_pop(L, 1); return 0; }
    size_t p = *used;
    int64_t count = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        size_t kl, sl = 0;
        const char *k, *s = NULL;
        if (lua_type(L, -2) != LUA_TSTRING || count == LB_FLAT_MAX) goto refuse;
        k = lua_tolstring(L, -2, &kl);
        if (kl > 255 || !lb_utf8_valid(k, kl)) goto refuse;
        char tag;
        int64_t iv = 0;
        double dv = 0;
        switch (lua_type(L, -1)) {
        case LUA_TSTRING:
            s = lua_tolstring(L, -1, &sl);
            if (sl > UINT32_MAX || !lb_utf8_valid(s, sl)) goto refuse;
            tag = 'S';
            break;
        case LUA_TNUMBER:
            if (lua_isinteger(L, -1)) { iv = (int64_t)lua_tointeger(L, -1); tag = 'I'; break; }
            dv = (double)lua_tonumber(L, -1);
            if (!isfinite(dv)) goto refuse;
            tag = 'N';
            break;
        case LUA_TBOOLEAN: tag = lua_toboolean(L, -1) ? 'T' : 'F'; break;
        case LUA_TLIGHTUSERDATA:
            if (lua_touserdata(L, -1) != NULL) goto refuse;
            tag = 'Z';
            break;
        default: goto refuse;
        }
        size_t need = 1 + kl + 1 + (tag == 'S' ? 4 + sl : tag == 'I' || tag == 'N' ? 8 : 0);
        if (need > cap - p) goto refuse;
        buf[p++] = (char)kl;
        memcpy(buf + p, k, kl);
        p += kl;
        buf[p++] = tag;
        if (tag == 'S') {
            uint32_t n32 = (uint32_t)sl;
            memcpy(buf + p, &n32, 4);
            memcpy(buf + p + 4, s, sl);
            p += 4 + sl;
        } else if (tag == 'I') {
            memcpy(buf + p, &iv, 8);
            p += 8;
        } else if (tag == 'N') {
            memcpy(buf + p, &dv, 8);
            p += 8;
        }
        lua_pop(L, 1);
        count++;
    }
    v->type = LB_FLAT;
    v->str = buf + *used;
    v->len = p - *used;
    v->integer = count;
    *used = p;
    return 1;
refuse:
    lua_pop(L, 2);
    return 0;
}

/* ---------------------------------------------------------------- decode */

/* Tokens on the C stack; a larger document gets a tape userdata of the exact size (counted by
 * the VM's allocator and collected even when a later allocation raises). */
#define STACK_TOKENS 128

typedef struct {
    lua_State *L;
    const cj_tok *toks;
    const uint8_t *src;
    uint32_t i;
} dec;

static void dec_string(dec *d, const cj_tok *t) {
    const uint8_t *s = d->src + t->off;
    if (!(t->flags & CJ_F_ESCAPED)) {
        lua_pushlstring(d->L, (const char *)s, t->len);
        return;
    }
    luaL_Buffer b;
    char *p = luaL_buffinitsize(d->L, &b, t->len);
    luaL_pushresultsize(&b, cj_unescape((uint8_t *)p, s, t->len));
}

static void dec_value(dec *d, int depth) {
    lua_State *L = d->L;
    const cj_tok *t = &d->toks[d->i++];
    /* As before the shared tokenizer: no value below MAX_DEPTH enclosing containers (cj_parse
     * let through one more level of containers, so only their children land here). */
    if (depth > MAX_DEPTH) {
        luaL_error(L, "invalid JSON: nesting too deep at offset %d", (int)t->off - (t->type == CJ_STRING));
    }
    switch (t->type) {
    case CJ_OBJECT:
        luaL_checkstack(L, 4, "json");
        lua_createtable(L, 0, (int)(t->len < 1u << 20 ? t->len : 1u << 20));
        for (uint32_t k = 0; k < t->len; k++) {
            dec_string(d, &d->toks[d->i++]);
            dec_value(d, depth + 1);
            lua_rawset(L, -3);
        }
        return;
    case CJ_ARRAY:
        luaL_checkstack(L, 4, "json");
        lua_createtable(L, (int)(t->len < 1u << 20 ? t->len : 1u << 20), 0);
        lua_rawgetp(L, LUA_REGISTRYINDEX, &lb_key_array_mt);
        lua_setmetatable(L, -2);
        for (uint32_t k = 0; k < t->len; k++) {
            dec_value(d, depth + 1);
            lua_rawseti(L, -2, (lua_Integer)k + 1);
        }
        return;
    case CJ_STRING: dec_string(d, t); return;
    case CJ_NUMBER: {
        int64_t iv;
        double dv;
        /* Integers beyond 64 bits become floats; beyond a double's range, +/-inf (as strtod). */
        if (cj_number(d->src + t->off, t->len, &iv, &dv) == CJ_NUM_INT) lua_pushinteger(L, (lua_Integer)iv);
        else lua_pushnumber(L, dv);
        return;
    }
    case CJ_TRUE: lua_pushboolean(L, 1); return;
    case CJ_FALSE: lua_pushboolean(L, 0); return;
    default: lua_pushlightuserdata(L, NULL); return;   /* json.null */
    }
}

int lb_json_decode(lua_State *L, const char *s, size_t n) {
    /* MAX_DEPTH counts the levels below the top value: MAX_DEPTH + 1 containers may nest (the
     * innermost one empty; dec_value refuses anything deeper). */
    const unsigned max_depth = MAX_DEPTH + 1;
    cj_tok stack_toks[STACK_TOKENS];
    cj_tape t = {stack_toks, STACK_TOKENS, 0, 0, NULL};
    int rc = cj_parse(&t, (const uint8_t *)s, n, max_depth);
    int boxed = 0;
    if (rc == CJ_EFULL) {
        uint32_t need = t.count;
        t.toks = lua_newuserdatauv(L, (size_t)need * sizeof(cj_tok), 0);
        t.cap = need;
        boxed = 1;
        rc = cj_parse(&t, (const uint8_t *)s, n, max_depth);
    }
    if (rc != CJ_OK) luaL_error(L, "invalid JSON: %s at offset %d", t.err ? t.err : "too many tokens", (int)t.err_off);
    dec d = {L, t.toks, (const uint8_t *)s, 0};
    dec_value(&d, 0);
    if (boxed) lua_remove(L, -2);
    return 1;
}

/* ---------------------------------------------------------------- json.* */

static int j_encode(lua_State *L) {
    luaL_checkany(L, 1);
    lb_vm *vm = lb_from(L);
    vm->scratch.n = 0;
    vm->scratch_limit = 0;
    lb_json_encode(L, 1, &vm->scratch);
    lua_pushlstring(L, vm->scratch.p ? vm->scratch.p : "", vm->scratch.n);
    return 1;
}

static int j_decode(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    return lb_json_decode(L, s, n);
}

/* json.array([t]) marks t (or a new table) as a JSON array, even when empty. */
static int j_array(lua_State *L) {
    if (lua_isnoneornil(L, 1)) lua_newtable(L);
    else luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    if (lua_getmetatable(L, 1)) {
        lua_rawgetp(L, LUA_REGISTRYINDEX, &lb_key_array_mt);
        if (!lua_rawequal(L, -1, -2)) luaL_error(L, "json.array: the table already has a metatable");
        lua_pop(L, 2);
        return 1;
    }
    lua_rawgetp(L, LUA_REGISTRYINDEX, &lb_key_array_mt);
    lua_setmetatable(L, 1);
    return 1;
}

int lb_json_lib(lua_State *L) {
    lua_createtable(L, 0, 1);
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_rawsetp(L, LUA_REGISTRYINDEX, &lb_key_array_mt);
    lua_createtable(L, 0, 4);
    lua_pushcfunction(L, j_encode); lua_setfield(L, -2, "encode");
    lua_pushcfunction(L, j_decode); lua_setfield(L, -2, "decode");
    lua_pushcfunction(L, j_array); lua_setfield(L, -2, "array");
    lua_pushlightuserdata(L, NULL); lua_setfield(L, -2, "null");
    return 1;
}
