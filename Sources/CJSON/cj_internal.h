/* Helpers shared by the CJSON files (not part of the public API). */
#ifndef MOONBASE_CJ_INTERNAL_H
#define MOONBASE_CJ_INTERNAL_H
#include "cjson.h"
#include <string.h>

#define CJ_ONES 0x0101010101010101ULL
#define CJ_HIGHS 0x8080808080808080ULL

static inline uint64_t cj_load8(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Nonzero when one of the 8 bytes of v is < 0x20, '"', '\\' (may flag extra bytes after a real
 * hit, never misses one): the bytes a JSON string body cannot hold verbatim. */
static inline uint64_t cj_special8(uint64_t v) {
    uint64_t q = v ^ (CJ_ONES * 0x22), b = v ^ (CJ_ONES * 0x5C);
    uint64_t lt = (v - CJ_ONES * 0x20) & ~v;
    uint64_t zq = (q - CJ_ONES) & ~q;
    uint64_t zb = (b - CJ_ONES) & ~b;
    return (lt | zq | zb) & CJ_HIGHS;
}

/* Length (2..4) of the well-formed UTF-8 sequence starting with the non-ASCII byte s[i],
 * or 0 when it is malformed, overlong, a surrogate, beyond U+10FFFF or truncated. */
static inline size_t cj_utf8_seq(const uint8_t *s, size_t i, size_t n) {
    uint8_t c = s[i];
    if (c >= 0xC2 && c <= 0xDF) {
        return (i + 1 < n && (s[i + 1] & 0xC0) == 0x80) ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (i + 2 >= n) return 0;
        uint8_t c1 = s[i + 1], c2 = s[i + 2];
        if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && c1 < 0xA0) return 0;          /* overlong */
        if (c == 0xED && c1 >= 0xA0) return 0;         /* U+D800..U+DFFF */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (i + 3 >= n) return 0;
        uint8_t c1 = s[i + 1], c2 = s[i + 2], c3 = s[i + 3];
        if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80 || (c3 & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && c1 < 0x90) return 0;          /* overlong */
        if (c == 0xF4 && c1 >= 0x90) return 0;         /* > U+10FFFF */
        return 4;
    }
    return 0;
}

static inline int cj_hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

#endif
