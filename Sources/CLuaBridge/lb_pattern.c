/*
 * lb_pattern.c: Lua's pattern functions (string.find/match/gmatch/gsub), re-implemented with a
 * step budget. The stock matcher backtracks inside one C call where no hook can reach it, so
 * `string.rep("a", 1e5):find(".-.-.-.-.-.-b")` would run for hours. Here every matcher step is
 * counted: every 1024 steps the call's kill flag (set by the watchdog's signal) is checked, and
 * past LB_PATTERN_MAX_STEPS the call fails with "pattern too complex". Semantics follow the
 * Lua 5.4 manual §6.4.1 (classes, sets, %b, %f, captures, back references, anchors).
 */
#define _GNU_SOURCE
#include "lb_internal.h"
#include <ctype.h>
#include <string.h>

#define LB_PATTERN_MAX_STEPS 50000000u
#define MAX_CAPS 32
#define MAX_RECURSION 200
#define CAP_UNFINISHED (-1)
#define CAP_POSITION (-2)
#define SPECIALS "^$*+?.([%-"

typedef struct {
    const char *src_init, *src_end, *p_end;
    lua_State *L;
    lb_vm *vm;
    int level, depth;
    unsigned steps;
    struct { const char *init; ptrdiff_t len; } cap[MAX_CAPS];
} ms_t;

static void tick(ms_t *ms) {
    if ((++ms->steps & 1023u) != 0) return;
    if (ms->vm->killed) lb_kill(ms->L, ms->vm, ms->vm->killed);
    if (ms->steps > LB_PATTERN_MAX_STEPS) luaL_error(ms->L, "pattern too complex (step limit exceeded)");
}

static const char *class_end(ms_t *ms, const char *p) {
    char c = *p++;
    if (c == '%') {
        if (p >= ms->p_end) luaL_error(ms->L, "malformed pattern (ends with '%%')");
        return p + 1;
    }
    if (c == '[') {
        if (p < ms->p_end && *p == '^') p++;
        do {   /* the first character after '[' or '[^' may be a literal ']' */
            if (p >= ms->p_end) luaL_error(ms->L, "malformed pattern (missing ']')");
            c = *p++;
            if (c == '%' && p < ms->p_end) p++;
        } while (p >= ms->p_end || *p != ']');
        return p + 1;
    }
    return p;
}

static int class_match(int c, int cl) {
    int r;
    switch (tolower(cl)) {
    case 'a': r = isalpha(c); break;
    case 'c': r = iscntrl(c); break;
    case 'd': r = isdigit(c); break;
    case 'g': r = isgraph(c); break;
    case 'l': r = islower(c); break;
    case 'p': r = ispunct(c); break;
    case 's': r = isspace(c); break;
    case 'u': r = isupper(c); break;
    case 'w': r = isalnum(c); break;
    case 'x': r = isxdigit(c); break;
    default: return cl == c;
    }
    r = r != 0;
    return isupper(cl) ? !r : r;
}

/* p points at '[', ec at the closing ']'. */
static int set_match(int c, const char *p, const char *ec) {
    int yes = 1;
    p++;
    if (*p == '^') { yes = 0; p++; }
    while (p < ec) {
        if (*p == '%' && p + 1 < ec) {
            p++;
            if (class_match(c, (unsigned char)*p)) return yes;
            p++;
        } else if (p + 2 < ec && p[1] == '-') {
            if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2]) return yes;
            p += 3;
        } else {
            if ((unsigned char)*p == c) return yes;
            p++;
        }
    }
    return !yes;
}

static int single_match(ms_t *ms, const char *s, const char *p, const char *ep) {
    if (s >= ms->src_end) return 0;
    int c = (unsigned char)*s;
    switch (*p) {
    case '.': return 1;
    case '%': return class_match(c, (unsigned char)p[1]);
    case '[': return set_match(c, p, ep - 1);
    default: return (unsigned char)*p == c;
    }
}

static const char *do_match(ms_t *ms, const char *s, const char *p);

static const char *balance(ms_t *ms, const char *s, const char *p) {
    if (p + 1 >= ms->p_end) luaL_error(ms->L, "malformed pattern (missing arguments to '%%b')");
    if (s >= ms->src_end || *s != *p) return NULL;
    char open = p[0], close = p[1];
    int depth = 1;
    while (++s < ms->src_end) {
        tick(ms);
        if (*s == close) { if (--depth == 0) return s + 1; }
        else if (*s == open) depth++;
    }
    return NULL;
}

static const char *max_expand(ms_t *ms, const char *s, const char *p, const char *ep) {
    ptrdiff_t i = 0;
    while (single_match(ms, s + i, p, ep)) { i++; tick(ms); }
    while (i >= 0) {
        const char *r = do_match(ms, s + i, ep + 1);
        if (r) return r;
        i--;
    }
    return NULL;
}

static const char *min_expand(ms_t *ms, const char *s, const char *p, const char *ep) {
    for (;;) {
        const char *r = do_match(ms, s, ep + 1);
        if (r) return r;
        if (!single_match(ms, s, p, ep)) return NULL;
        s++;
    }
}

static const char *open_capture(ms_t *ms, const char *s, const char *p, ptrdiff_t what) {
    if (ms->level >= MAX_CAPS) luaL_error(ms->L, "too many captures");
    ms->cap[ms->level].init = s;
    ms->cap[ms->level].len = what;
    ms->level++;
    const char *r = do_match(ms, s, p);
    if (!r) ms->level--;
    return r;
}

static const char *close_capture(ms_t *ms, const char *s, const char *p) {
    int l = -1;
    for (int i = ms->level - 1; i >= 0; i--)
        if (ms->cap[i].len == CAP_UNFINISHED) { l = i; break; }
    if (l < 0) luaL_error(ms->L, "invalid pattern capture");
    ms->cap[l].len = s - ms->cap[l].init;
    const char *r = do_match(ms, s, p);
    if (!r) ms->cap[l].len = CAP_UNFINISHED;
    return r;
}

static const char *back_reference(ms_t *ms, const char *s, int digit) {
    int l = digit - '1';
    if (l < 0 || l >= ms->level || ms->cap[l].len == CAP_UNFINISHED)
        luaL_error(ms->L, "invalid capture index %%%d", l + 1);
    ptrdiff_t len = ms->cap[l].len;
    if (len < 0) return NULL;   /* a position capture matches nothing */
    if (ms->src_end - s >= len && memcmp(ms->cap[l].init, s, (size_t)len) == 0) return s + len;
    return NULL;
}

static const char *do_match(ms_t *ms, const char *s, const char *p) {
    if (ms->depth-- == 0) luaL_error(ms->L, "pattern too complex");
    tick(ms);
    while (p < ms->p_end) {
        if (*p == '(') {
            if (p + 1 < ms->p_end && p[1] == ')') s = open_capture(ms, s, p + 2, CAP_POSITION);
            else s = open_capture(ms, s, p + 1, CAP_UNFINISHED);
            goto out;
        }
        if (*p == ')') { s = close_capture(ms, s, p + 1); goto out; }
        if (*p == '$' && p + 1 == ms->p_end) { if (s != ms->src_end) s = NULL; goto out; }
        if (*p == '%' && p + 1 < ms->p_end) {
            if (p[1] == 'b') {
                s = balance(ms, s, p + 2);
                if (!s) goto out;
                p += 4;
                continue;
            }
            if (p[1] == 'f') {
                p += 2;
                if (p >= ms->p_end || *p != '[') luaL_error(ms->L, "missing '[' after '%%f' in pattern");
                const char *ep = class_end(ms, p);
                int prev = (s == ms->src_init) ? 0 : (unsigned char)s[-1];
                int cur = (s < ms->src_end) ? (unsigned char)*s : 0;
                if (!set_match(prev, p, ep - 1) && set_match(cur, p, ep - 1)) { p = ep; continue; }
                s = NULL;
                goto out;
            }
            if (isdigit((unsigned char)p[1])) {
                s = back_reference(ms, s, p[1]);
                if (!s) goto out;
                p += 2;
                continue;
            }
        }
        const char *ep = class_end(ms, p);
        char q = ep < ms->p_end ? *ep : 0;
        if (!single_match(ms, s, p, ep)) {
            if (q == '*' || q == '?' || q == '-') { p = ep + 1; continue; }
            s = NULL;
            goto out;
        }
        if (q == '?') {
            const char *r = do_match(ms, s + 1, ep + 1);
            if (r) { s = r; goto out; }
            p = ep + 1;
            continue;
        }
        if (q == '+') { s = max_expand(ms, s + 1, p, ep); goto out; }
        if (q == '*') { s = max_expand(ms, s, p, ep); goto out; }
        if (q == '-') { s = min_expand(ms, s, p, ep); goto out; }
        s++;
        p = ep;
    }
out:
    ms->depth++;
    return s;
}

/* ---------------------------------------------------------------- captures */

static void push_capture(ms_t *ms, int i, const char *s, const char *e) {
    if (i >= ms->level) {
        if (i != 0) luaL_error(ms->L, "invalid capture index %%%d", i + 1);
        lua_pushlstring(ms->L, s, (size_t)(e - s));
        return;
    }
    ptrdiff_t l = ms->cap[i].len;
    if (l == CAP_UNFINISHED) luaL_error(ms->L, "unfinished capture");
    if (l == CAP_POSITION) lua_pushinteger(ms->L, (ms->cap[i].init - ms->src_init) + 1);
    else lua_pushlstring(ms->L, ms->cap[i].init, (size_t)l);
}

static int push_captures(ms_t *ms, const char *s, const char *e) {
    int n = (ms->level == 0 && s) ? 1 : ms->level;
    luaL_checkstack(ms->L, n, "too many captures");
    for (int i = 0; i < n; i++) push_capture(ms, i, s, e);
    return n;
}

static void ms_init(ms_t *ms, lua_State *L, const char *s, size_t ls, const char *p, size_t lp) {
    ms->L = L;
    ms->vm = lb_from(L);
    ms->src_init = s;
    ms->src_end = s + ls;
    ms->p_end = p + lp;
    ms->steps = 0;
}
static void ms_reset(ms_t *ms) { ms->level = 0; ms->depth = MAX_RECURSION; }

static size_t start_index(lua_Integer pos, size_t len) {
    if (pos > 0) return (size_t)pos;
    if (pos == 0) return 1;
    if (pos < -(lua_Integer)len) return 1;
    return len + (size_t)pos + 1;
}

static int no_specials(const char *p, size_t l) {
    for (size_t i = 0; i < l; i++)
        if (strchr(SPECIALS, p[i]) && p[i]) return 0;
    return 1;
}

static int find_aux(lua_State *L, int find) {
    size_t ls, lp;
    const char *s = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    size_t init = start_index(luaL_optinteger(L, 3, 1), ls) - 1;
    if (init > ls) { luaL_pushfail(L); return 1; }
    if (find && (lua_toboolean(L, 4) || no_specials(p, lp))) {
        const char *r = lp == 0 ? s + init : memmem(s + init, ls - init, p, lp);
        if (r) {
            lua_pushinteger(L, (r - s) + 1);
            lua_pushinteger(L, (lua_Integer)((r - s) + lp));
            return 2;
        }
        luaL_pushfail(L);
        return 1;
    }
    ms_t ms;
    int anchor = lp > 0 && *p == '^';
    if (anchor) { p++; lp--; }
    ms_init(&ms, L, s, ls, p, lp);
    const char *s1 = s + init;
    do {
        ms_reset(&ms);
        const char *e = do_match(&ms, s1, p);
        if (e) {
            if (find) {
                lua_pushinteger(L, (s1 - s) + 1);
                lua_pushinteger(L, e - s);
                return push_captures(&ms, NULL, NULL) + 2;
            }
            return push_captures(&ms, s1, e);
        }
    } while (s1++ < ms.src_end && !anchor);
    luaL_pushfail(L);
    return 1;
}

static int p_find(lua_State *L) { return find_aux(L, 1); }
static int p_match(lua_State *L) { return find_aux(L, 0); }

/* gmatch state lives in upvalues: 1 subject, 2 pattern, 3 next position, 4 last match end. */
static int gmatch_step(lua_State *L) {
    size_t ls, lp;
    const char *s = lua_tolstring(L, lua_upvalueindex(1), &ls);
    const char *p = lua_tolstring(L, lua_upvalueindex(2), &lp);
    lua_Integer pos = lua_tointeger(L, lua_upvalueindex(3));
    lua_Integer last = lua_tointeger(L, lua_upvalueindex(4));
    ms_t ms;
    ms_init(&ms, L, s, ls, p, lp);
    for (const char *src = s + pos; src <= ms.src_end; src++) {
        ms_reset(&ms);
        const char *e = do_match(&ms, src, p);
        if (e && (last < 0 || e != s + last)) {
            lua_pushinteger(L, e - s);
            lua_replace(L, lua_upvalueindex(3));
            lua_pushinteger(L, e - s);
            lua_replace(L, lua_upvalueindex(4));
            return push_captures(&ms, src, e);
        }
    }
    return 0;
}

static int p_gmatch(lua_State *L) {
    size_t ls;
    luaL_checklstring(L, 1, &ls);
    luaL_checkstring(L, 2);
    size_t init = start_index(luaL_optinteger(L, 3, 1), ls) - 1;
    if (init > ls) init = ls + 1;
    lua_settop(L, 2);
    lua_pushinteger(L, (lua_Integer)init);
    lua_pushinteger(L, -1);
    lua_pushcclosure(L, gmatch_step, 4);
    return 1;
}

static void add_replacement(ms_t *ms, luaL_Buffer *b, const char *s, const char *e, int tr) {
    lua_State *L = ms->L;
    if (tr == LUA_TFUNCTION) {
        lua_pushvalue(L, 3);
        int n = push_captures(ms, s, e);
        lua_call(L, n, 1);
    } else if (tr == LUA_TTABLE) {
        push_capture(ms, 0, s, e);
        lua_gettable(L, 3);
    } else {
        size_t l;
        const char *r = lua_tolstring(L, 3, &l);
        const char *end = r + l;
        while (r < end) {
            const char *pct = memchr(r, '%', (size_t)(end - r));
            if (!pct) { luaL_addlstring(b, r, (size_t)(end - r)); break; }
            luaL_addlstring(b, r, (size_t)(pct - r));
            pct++;
            if (pct >= end) luaL_error(L, "invalid use of '%%' in replacement string");
            if (*pct == '%') luaL_addchar(b, '%');
            else if (*pct == '0') luaL_addlstring(b, s, (size_t)(e - s));
            else if (isdigit((unsigned char)*pct)) {
                push_capture(ms, *pct - '1', s, e);
                luaL_tolstring(L, -1, NULL);
                lua_remove(L, -2);
                luaL_addvalue(b);
            } else luaL_error(L, "invalid use of '%%' in replacement string");
            r = pct + 1;
        }
        return;
    }
    if (!lua_toboolean(L, -1)) {
        lua_pop(L, 1);
        luaL_addlstring(b, s, (size_t)(e - s));
    } else if (!lua_isstring(L, -1)) {
        luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
    } else {
        luaL_addvalue(b);
    }
}

static int p_gsub(lua_State *L) {
    size_t ls, lp;
    const char *src = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    int tr = lua_type(L, 3);
    luaL_argexpected(L, tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION || tr == LUA_TTABLE,
                     3, "string/function/table");
    lua_Integer max_n = luaL_optinteger(L, 4, (lua_Integer)ls + 1);
    int anchor = lp > 0 && *p == '^';
    if (anchor) { p++; lp--; }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    ms_t ms;
    ms_init(&ms, L, src, ls, p, lp);
    const char *last = NULL;
    lua_Integer n = 0;
    while (n < max_n) {
        ms_reset(&ms);
        const char *e = do_match(&ms, src, p);
        if (e && e != last) {
            n++;
            add_replacement(&ms, &b, src, e, tr);
            src = last = e;
        } else if (src < ms.src_end) {
            luaL_addchar(&b, *src++);
        } else break;
        if (anchor) break;
    }
    luaL_addlstring(&b, src, (size_t)(ms.src_end - src));
    luaL_pushresult(&b);
    lua_pushinteger(L, n);
    return 2;
}

void lb_patterns_install(lua_State *L, int strtab) {
    strtab = lua_absindex(L, strtab);
    lua_pushcfunction(L, p_find); lua_setfield(L, strtab, "find");
    lua_pushcfunction(L, p_match); lua_setfield(L, strtab, "match");
    lua_pushcfunction(L, p_gmatch); lua_setfield(L, strtab, "gmatch");
    lua_pushcfunction(L, p_gsub); lua_setfield(L, strtab, "gsub");
}
