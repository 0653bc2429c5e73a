/*
 * lb_stdlib.c: bounded replacements for the standard-library functions whose stock C loops can
 * run for hours without allocating and without calling back into Lua. Such a loop reaches no
 * hook (a kill armed by the watchdog waits for the next Lua instruction) and no allocation (the
 * memory cap never trips), so the call would never return: `string.rep("", 2^62)`,
 * `table.move({}, 1, 2^62, 2)`. Each replacement keeps the manual's semantics and calls
 * lb_tick every LB_TICK_EVERY steps, which ends the call with its tripped limit (timeout,
 * writer hold, instruction budget) exactly like a hook would, so the script's own pcall cannot
 * swallow it (lb_kill).
 *
 * Audit of the allowed library (Lua 5.4), and why the rest needs no replacement:
 *   string.rep        REPLACED: empty pieces looped n times copying nothing; now O(1) for an
 *                     empty result, and the copy loop ticks.
 *   table.insert      REPLACED: the shift loop runs #t times; `#t` comes from __len (any number)
 *   table.remove      REPLACED:   or from a border far away ({[1]=1,[2]=1,[4]=1,...,[2^62]=1}
 *                                 has #t = 2^62 with 63 entries); moving nils allocates nothing.
 *   table.move        REPLACED: the range is the caller's (1..2^62), moving nils allocates nothing.
 *   table.sort        REPLACED: O(n log n) comparisons of up to 2^31 elements with no Lua code
 *                     (numbers and strings compare in C); now a heap sort that ticks.
 *   json.encode       (lb_json.c) ticks per array element: json.array(t) takes its length from
 *                     the border, like table.insert.
 *   string.find/match/gmatch/gsub   bounded in lb_pattern.c (step budget + kill check).
 *   string.byte, string.char, utf8.char, utf8.codepoint, table.unpack, table.pack, select
 *                     push at most the Lua stack's limit (1,000,000 values), then fail.
 *   string.sub/upper/lower/reverse/len/format/pack/unpack, utf8.len/offset/codes, tonumber,
 *   tostring, table.concat, os.date   linear in a string or a table the script already built (so
 *                     bounded by the memory cap) or in output they allocate (memory cap again);
 *                     format widths and precisions are at most two digits.
 *   ipairs, pairs, next, utf8.codes, string.gmatch   iterators: one step per Lua loop turn, so
 *                     the hook runs between steps.
 *   metamethods (__index, __len, __lt, __tostring, a sort comparator, a gsub callback)   are Lua
 *                     code: the kill hook fires inside them.
 *   math.*, os.time/clock/difftime, rawlen, rawget, rawset, rawequal, type, error, assert
 *                     constant time (math.random's rejection loop ends with probability 1/2 per turn).
 *   load              compiles text the script already holds (linear, bounded by the memory cap).
 */
#include "lb_internal.h"
#include <limits.h>
#include <string.h>

#define LB_TICK_EVERY 4096u

/* A tripped limit (set by the watchdog's signal or an exhausted instruction budget) ends the
 * call here, inside a C loop no hook reaches. `steps` count towards the instruction budget. */
void lb_tick(lua_State *L, unsigned steps) {
    lb_vm *vm = lb_from(L);
    if (!vm->killed && vm->max_instructions > 0) {
        vm->instructions += steps;
        if (vm->instructions > vm->max_instructions) vm->killed = LB_KILL_INSTRUCTIONS;
    }
    if (vm->killed) lb_kill(L, vm, vm->killed);
}

/* ---------------------------------------------------------------- string.rep */

static int s_rep(lua_State *L) {
    size_t l, lsep;
    const char *s = luaL_checklstring(L, 1, &l);
    lua_Integer n = luaL_checkinteger(L, 2);
    const char *sep = luaL_optlstring(L, 3, "", &lsep);
    if (n <= 0 || l + lsep == 0) {
        /* Empty pieces make an empty result whatever n is: no loop at all. */
        lua_pushliteral(L, "");
        return 1;
    }
    if (l + lsep < l || l + lsep > (size_t)LUA_MAXINTEGER / (lua_Unsigned)n)
        return luaL_error(L, "resulting string too large");
    size_t total = (size_t)n * l + (size_t)(n - 1) * lsep;
    luaL_Buffer b;
    char *p = luaL_buffinitsize(L, &b, total);   /* the memory cap refuses a too large result */
    unsigned k = 0;
    while (n-- > 1) {
        memcpy(p, s, l);
        p += l;
        if (lsep > 0) { memcpy(p, sep, lsep); p += lsep; }
        if (++k == LB_TICK_EVERY) { lb_tick(L, k); k = 0; }
    }
    memcpy(p, s, l);
    luaL_pushresultsize(&b, total);
    return 1;
}

/* ---------------------------------------------------------------- table helpers */

enum { TAB_R = 1, TAB_W = 2, TAB_L = 4, TAB_RW = TAB_R | TAB_W };

static int has_field(lua_State *L, int mt, const char *key) {
    lua_pushstring(L, key);
    return lua_rawget(L, mt) != LUA_TNIL;
}

/* A table, or a value whose metatable provides what `what` needs (as the stock library). */
static void check_tab(lua_State *L, int arg, int what) {
    if (lua_type(L, arg) == LUA_TTABLE) return;
    int n = 1, mt = lua_gettop(L) + 1;
    if (lua_getmetatable(L, arg) &&
        (!(what & TAB_R) || (n++, has_field(L, mt, "__index"))) &&
        (!(what & TAB_W) || (n++, has_field(L, mt, "__newindex"))) &&
        (!(what & TAB_L) || (n++, has_field(L, mt, "__len")))) {
        lua_pop(L, n);
        return;
    }
    luaL_checktype(L, arg, LUA_TTABLE);   /* raises with the usual message */
}

static lua_Integer tab_len(lua_State *L, int arg, int what) {
    check_tab(L, arg, what | TAB_L);
    return luaL_len(L, arg);
}

/* ---------------------------------------------------------------- table.insert / remove */

static int t_insert(lua_State *L) {
    lua_Integer e = tab_len(L, 1, TAB_RW);
    e = (lua_Integer)((lua_Unsigned)e + 1u);   /* first empty slot */
    lua_Integer pos;
    switch (lua_gettop(L)) {
    case 2:
        pos = e;
        break;
    case 3: {
        pos = luaL_checkinteger(L, 2);
        luaL_argcheck(L, (lua_Unsigned)pos - 1u < (lua_Unsigned)e, 2, "position out of bounds");
        unsigned k = 0;
        for (lua_Integer i = e; i > pos; i--) {   /* shift up */
            lua_geti(L, 1, i - 1);
            lua_seti(L, 1, i);
            if (++k == LB_TICK_EVERY) { lb_tick(L, k); k = 0; }
        }
        break;
    }
    default:
        return luaL_error(L, "wrong number of arguments to 'insert'");
    }
    lua_seti(L, 1, pos);
    return 0;
}

static int t_remove(lua_State *L) {
    lua_Integer size = tab_len(L, 1, TAB_RW);
    lua_Integer pos = luaL_optinteger(L, 2, size);
    if (pos != size)
        luaL_argcheck(L, (lua_Unsigned)pos - 1u <= (lua_Unsigned)size, 2, "position out of bounds");
    lua_geti(L, 1, pos);
    unsigned k = 0;
    for (; pos < size; pos++) {   /* shift down */
        lua_geti(L, 1, pos + 1);
        lua_seti(L, 1, pos);
        if (++k == LB_TICK_EVERY) { lb_tick(L, k); k = 0; }
    }
    lua_pushnil(L);
    lua_seti(L, 1, pos);
    return 1;
}

/* ---------------------------------------------------------------- table.move */

static int t_move(lua_State *L) {
    lua_Integer f = luaL_checkinteger(L, 2);
    lua_Integer e = luaL_checkinteger(L, 3);
    lua_Integer t = luaL_checkinteger(L, 4);
    int tt = !lua_isnoneornil(L, 5) ? 5 : 1;
    check_tab(L, 1, TAB_R);
    check_tab(L, tt, TAB_W);
    if (e >= f) {
        luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
        lua_Integer n = e - f + 1;
        luaL_argcheck(L, t <= LUA_MAXINTEGER - n + 1, 4, "destination wrap around");
        unsigned k = 0;
        if (t > e || t <= f || (tt != 1 && !lua_compare(L, 1, tt, LUA_OPEQ))) {
            for (lua_Integer i = 0; i < n; i++) {
                lua_geti(L, 1, f + i);
                lua_seti(L, tt, t + i);
                if (++k == LB_TICK_EVERY) { lb_tick(L, k); k = 0; }
            }
        } else {
            for (lua_Integer i = n - 1; i >= 0; i--) {
                lua_geti(L, 1, f + i);
                lua_seti(L, tt, t + i);
                if (++k == LB_TICK_EVERY) { lb_tick(L, k); k = 0; }
            }
        }
    }
    lua_pushvalue(L, tt);
    return 1;
}

/* ---------------------------------------------------------------- table.sort */

typedef struct { lua_State *L; int has_comp; unsigned k; } sorter;

/* Whether the value at stack index `a` sorts before the one at `b`; ticks. */
static int sort_less(sorter *s, int a, int b) {
    lua_State *L = s->L;
    if (++s->k == LB_TICK_EVERY) { lb_tick(L, s->k); s->k = 0; }
    if (!s->has_comp) return lua_compare(L, a, b, LUA_OPLT);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, a);
    lua_pushvalue(L, b);
    lua_call(L, 2, 1);
    int r = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return r;
}

/* Sifts the value on top of the stack down from `root` within the max-heap a[1..end], moving
 * larger children up into the hole, and stores it where it belongs (pops it). */
static void sift_down(sorter *s, lua_Integer root, lua_Integer end) {
    lua_State *L = s->L;
    int v = lua_gettop(L);
    lua_Integer start = root;
    for (;;) {
        lua_Integer child = root * 2;
        if (child > end) break;
        lua_geti(L, 1, child);                       /* v+1: the larger child */
        if (child + 1 <= end) {
            lua_geti(L, 1, child + 1);
            if (sort_less(s, v + 1, v + 2)) { lua_replace(L, v + 1); child++; }
            else lua_pop(L, 1);
        }
        if (!sort_less(s, v, v + 1)) { lua_pop(L, 1); break; }
        lua_seti(L, 1, root);                        /* the child moves up into the hole */
        root = child;
    }
    /* While building the heap the value was read from `start`: if it stays there, no store (a
     * store could add an entry). At the root (start 1) it is always stored: while extracting
     * it is the last leaf, moved there. */
    if (root == start && start != 1) lua_pop(L, 1);
    else lua_seti(L, 1, root);
}

/* Heap sort: O(n log n) comparisons whatever the input or the comparator (an inconsistent
 * comparator cannot make it read out of range), no recursion, and a kill check every
 * LB_TICK_EVERY comparisons. Not stable, like the stock sort. */
static int t_sort(lua_State *L) {
    lua_Integer n = tab_len(L, 1, TAB_RW);
    if (n > 1) {
        luaL_argcheck(L, n < INT_MAX, 1, "array too big");
        if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TFUNCTION);
        lua_settop(L, 2);
        luaL_checkstack(L, 8, "sort");
        sorter s = {L, !lua_isnil(L, 2), 0};
        for (lua_Integer i = n / 2; i >= 1; i--) {
            lua_geti(L, 1, i);
            sift_down(&s, i, n);
        }
        for (lua_Integer end = n; end > 1; end--) {
            lua_geti(L, 1, end);                     /* the last leaf leaves the heap ... */
            lua_geti(L, 1, 1);
            lua_seti(L, 1, end);                     /* ... the maximum takes its place */
            sift_down(&s, 1, end - 1);               /* and the leaf sinks from the root */
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- install */

void lb_stdlib_install(lua_State *L, int strtab, int tabtab) {
    strtab = lua_absindex(L, strtab);
    tabtab = lua_absindex(L, tabtab);
    lua_pushcfunction(L, s_rep); lua_setfield(L, strtab, "rep");
    lua_pushcfunction(L, t_insert); lua_setfield(L, tabtab, "insert");
    lua_pushcfunction(L, t_remove); lua_setfield(L, tabtab, "remove");
    lua_pushcfunction(L, t_move); lua_setfield(L, tabtab, "move");
    lua_pushcfunction(L, t_sort); lua_setfield(L, tabtab, "sort");
}
