/*
 * lb_json.c: JSON text <-> Lua values, in C (FINDINGS §2: documents stay bytes until a script
 * needs them). Semantics (DESIGN §10): JSON null <-> json.null (a NULL light userdata, so null
 * members survive a round trip); arrays decode with a marker metatable so `[]` stays `[]`;
 * json.array(t) marks a table as an array; other empty tables encode as `{}`; integers stay
 * integers and floats keep a fraction ("3.0"); NaN/inf, cycles and non-UTF-8 strings raise.
 */
#include "lb_internal.h"
#include "cjson.h"
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <math.h>
#include <errno.h>

#define MAX_DEPTH 200
#define MAX_OUT ((size_t)256 << 20)

int lb_utf8_valid(const char *s, size_t n) { return cj_utf8_valid((const uint8_t *)s, n); }

/* ---------------------------------------------------------------- buffer */

static void buf_reserve(lua_State *L, lb_buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return;
    if (b->n + extra > MAX_OUT) luaL_error(L, "JSON text too large");
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) luaL_error(L, "not enough memory");
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
    static const char hex[] = "0123456789abcdef";
    buf_reserve(L, b, n + 2);
    b->p[b->n++] = '"';
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        put(L, b, s + run, i - run);
        run = i + 1;
        char esc[6] = {'\\', 0};
        switch (c) {
        case '"': esc[1] = '"'; put(L, b, esc, 2); break;
        case '\\': esc[1] = '\\'; put(L, b, esc, 2); break;
        case '\n': esc[1] = 'n'; put(L, b, esc, 2); break;
        case '\r': esc[1] = 'r'; put(L, b, esc, 2); break;
        case '\t': esc[1] = 't'; put(L, b, esc, 2); break;
        default:
            esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = hex[c >> 4]; esc[5] = hex[c & 15];
            put(L, b, esc, 6);
        }
    }
    put(L, b, s + run, n - run);
    putc_(L, b, '"');
}

static void enc_number(lua_State *L, lb_buf *b, int idx) {
    char tmp[64];
    int len;
    if (lua_isinteger(L, idx)) {
        len = snprintf(tmp, sizeof tmp, "%lld", (long long)lua_tointeger(L, idx));
    } else {
        double d = lua_tonumber(L, idx);
        if (!isfinite(d)) luaL_error(L, "cannot encode a non-finite number");
        len = snprintf(tmp, sizeof tmp, "%.15g", d);
        if (strtod(tmp, NULL) != d) len = snprintf(tmp, sizeof tmp, "%.17g", d);
        if (!strpbrk(tmp, ".eEn")) { tmp[len++] = '.'; tmp[len++] = '0'; tmp[len] = 0; }
    }
    put(L, b, tmp, (size_t)len);
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

static void enc_table(lua_State *L, lb_buf *b, int idx, int depth) {
    if (depth > MAX_DEPTH) luaL_error(L, "cannot encode: tables nested too deeply (a cycle?)");
    luaL_checkstack(L, 6, "json");
    lb_vm *vm = lb_from(L);
    if (vm->killed) lb_kill(L, vm, vm->killed);
    lua_Integer n;
    if (lb_table_is_array(L, idx, &n)) {
        putc_(L, b, '[');
        for (lua_Integer i = 1; i <= n; i++) {
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
        if (kt == LUA_TSTRING) {
            size_t kl;
            const char *k = lua_tolstring(L, -2, &kl);
            enc_string(L, b, k, kl);
        } else if (kt == LUA_TNUMBER && lua_isinteger(L, -2)) {
            char tmp[32];
            int len = snprintf(tmp, sizeof tmp, "\"%lld\"", (long long)lua_tointeger(L, -2));
            put(L, b, tmp, (size_t)len);
        } else {
            luaL_error(L, "cannot encode a table key of type %s", luaL_typename(L, -2));
        }
        putc_(L, b, ':');
        enc_value(L, b, lua_gettop(L), depth + 1);
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

/* ---------------------------------------------------------------- decode */

typedef struct { const char *p, *end, *start; lua_State *L; } dec;

static void dec_fail(dec *d, const char *what) {
    luaL_error(d->L, "invalid JSON: %s at offset %d", what, (int)(d->p - d->start));
}
static void skip_ws(dec *d) {
    while (d->p < d->end && (*d->p == ' ' || *d->p == '\t' || *d->p == '\n' || *d->p == '\r')) d->p++;
}
static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
static unsigned read_u4(dec *d) {
    if (d->end - d->p < 4) dec_fail(d, "bad \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(d->p[i]);
        if (h < 0) dec_fail(d, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    d->p += 4;
    return v;
}

static void dec_string(dec *d) {
    lua_State *L = d->L;
    d->p++;
    const char *s = d->p;
    while (d->p < d->end && *d->p != '"' && *d->p != '\\' && (unsigned char)*d->p >= 0x20) d->p++;
    if (d->p < d->end && *d->p == '"') {
        if (!lb_utf8_valid(s, (size_t)(d->p - s))) dec_fail(d, "invalid UTF-8");
        lua_pushlstring(L, s, (size_t)(d->p - s));
        d->p++;
        return;
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addlstring(&b, s, (size_t)(d->p - s));
    const char *run = d->p;
    for (;;) {
        if (d->p >= d->end) dec_fail(d, "unterminated string");
        unsigned char c = (unsigned char)*d->p;
        if (c == '"') break;
        if (c < 0x20) dec_fail(d, "control character in string");
        if (c != '\\') { d->p++; continue; }
        luaL_addlstring(&b, run, (size_t)(d->p - run));
        d->p++;
        if (d->p >= d->end) dec_fail(d, "bad escape");
        char e = *d->p++;
        switch (e) {
        case '"': luaL_addchar(&b, '"'); break;
        case '\\': luaL_addchar(&b, '\\'); break;
        case '/': luaL_addchar(&b, '/'); break;
        case 'b': luaL_addchar(&b, '\b'); break;
        case 'f': luaL_addchar(&b, '\f'); break;
        case 'n': luaL_addchar(&b, '\n'); break;
        case 'r': luaL_addchar(&b, '\r'); break;
        case 't': luaL_addchar(&b, '\t'); break;
        case 'u': {
            unsigned cp = read_u4(d);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (d->end - d->p < 6 || d->p[0] != '\\' || d->p[1] != 'u') dec_fail(d, "lone surrogate");
                d->p += 2;
                unsigned lo = read_u4(d);
                if (lo < 0xDC00 || lo > 0xDFFF) dec_fail(d, "lone surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                dec_fail(d, "lone surrogate");
            }
            char u[4];
            int n;
            if (cp < 0x80) { u[0] = (char)cp; n = 1; }
            else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
            else if (cp < 0x10000) { u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[2] = (char)(0x80 | (cp & 0x3F)); n = 3; }
            else { u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)); u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4; }
            luaL_addlstring(&b, u, (size_t)n);
            break;
        }
        default: dec_fail(d, "bad escape");
        }
        run = d->p;
    }
    luaL_addlstring(&b, run, (size_t)(d->p - run));
    d->p++;
    luaL_pushresult(&b);
    size_t n;
    const char *r = lua_tolstring(L, -1, &n);
    if (!lb_utf8_valid(r, n)) dec_fail(d, "invalid UTF-8");
}

static void dec_number(dec *d) {
    const char *s = d->p;
    int is_float = 0;
    if (d->p < d->end && *d->p == '-') d->p++;
    if (d->p >= d->end) dec_fail(d, "bad number");
    if (*d->p == '0') d->p++;
    else if (*d->p >= '1' && *d->p <= '9') { while (d->p < d->end && *d->p >= '0' && *d->p <= '9') d->p++; }
    else dec_fail(d, "bad number");
    if (d->p < d->end && *d->p == '.') {
        is_float = 1; d->p++;
        if (d->p >= d->end || *d->p < '0' || *d->p > '9') dec_fail(d, "bad number");
        while (d->p < d->end && *d->p >= '0' && *d->p <= '9') d->p++;
    }
    if (d->p < d->end && (*d->p == 'e' || *d->p == 'E')) {
        is_float = 1; d->p++;
        if (d->p < d->end && (*d->p == '+' || *d->p == '-')) d->p++;
        if (d->p >= d->end || *d->p < '0' || *d->p > '9') dec_fail(d, "bad number");
        while (d->p < d->end && *d->p >= '0' && *d->p <= '9') d->p++;
    }
    char tmp[80];
    size_t n = (size_t)(d->p - s);
    if (n >= sizeof tmp) dec_fail(d, "number too long");
    memcpy(tmp, s, n);
    tmp[n] = 0;
    if (!is_float) {
        char *endp;
        errno = 0;
        long long v = strtoll(tmp, &endp, 10);
        if (errno == 0) { lua_pushinteger(d->L, (lua_Integer)v); return; }
    }
    lua_pushnumber(d->L, strtod(tmp, NULL));
}

static void dec_value(dec *d, int depth);

static void dec_lit(dec *d, const char *lit, size_t n) {
    if ((size_t)(d->end - d->p) < n || memcmp(d->p, lit, n) != 0) dec_fail(d, "unexpected character");
    d->p += n;
}

static void dec_value(dec *d, int depth) {
    lua_State *L = d->L;
    if (depth > MAX_DEPTH) dec_fail(d, "nesting too deep");
    luaL_checkstack(L, 4, "json");
    skip_ws(d);
    if (d->p >= d->end) dec_fail(d, "unexpected end");
    switch (*d->p) {
    case '{': {
        d->p++;
        lua_newtable(L);
        skip_ws(d);
        if (d->p < d->end && *d->p == '}') { d->p++; return; }
        for (;;) {
            skip_ws(d);
            if (d->p >= d->end || *d->p != '"') dec_fail(d, "expected a key");
            dec_string(d);
            skip_ws(d);
            if (d->p >= d->end || *d->p != ':') dec_fail(d, "expected ':'");
            d->p++;
            dec_value(d, depth + 1);
            lua_rawset(L, -3);
            skip_ws(d);
            if (d->p < d->end && *d->p == ',') { d->p++; continue; }
            if (d->p < d->end && *d->p == '}') { d->p++; return; }
            dec_fail(d, "expected ',' or '}'");
        }
    }
    case '[': {
        d->p++;
        lua_newtable(L);
        lua_rawgetp(L, LUA_REGISTRYINDEX, &lb_key_array_mt);
        lua_setmetatable(L, -2);
        skip_ws(d);
        if (d->p < d->end && *d->p == ']') { d->p++; return; }
        lua_Integer i = 1;
        for (;;) {
            dec_value(d, depth + 1);
            lua_rawseti(L, -2, i++);
            skip_ws(d);
            if (d->p < d->end && *d->p == ',') { d->p++; continue; }
            if (d->p < d->end && *d->p == ']') { d->p++; return; }
            dec_fail(d, "expected ',' or ']'");
        }
    }
    case '"': dec_string(d); return;
    case 't': dec_lit(d, "true", 4); lua_pushboolean(L, 1); return;
    case 'f': dec_lit(d, "false", 5); lua_pushboolean(L, 0); return;
    case 'n': dec_lit(d, "null", 4); lua_pushlightuserdata(L, NULL); return;
    default: dec_number(d); return;
    }
}

int lb_json_decode(lua_State *L, const char *s, size_t n) {
    dec d = {s, s + n, s, L};
    dec_value(&d, 0);
    skip_ws(&d);
    if (d.p != d.end) dec_fail(&d, "trailing characters");
    return 1;
}

/* ---------------------------------------------------------------- json.* */

static int j_encode(lua_State *L) {
    luaL_checkany(L, 1);
    lb_vm *vm = lb_from(L);
    vm->scratch.n = 0;
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
