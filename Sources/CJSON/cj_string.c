/*
 * String bodies: decoding the escapes of a validated token, escaping for output, and UTF-8
 * validation (RFC 3629) for strings that did not come through cj_parse.
 * Unescaping and escaping copy runs of plain bytes with memcpy; the scans look at 8 bytes at a time.
 */
#include "cj_internal.h"

static inline size_t put_utf8(uint8_t *d, unsigned cp) {
    if (cp < 0x80) { d[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) {
        d[0] = (uint8_t)(0xC0 | (cp >> 6));
        d[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (uint8_t)(0xE0 | (cp >> 12));
        d[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (uint8_t)(0xF0 | (cp >> 18));
    d[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    d[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Four hex digits at s (validated by cj_parse; a bad digit reads as 0, never out of bounds). */
static inline unsigned hex4(const uint8_t *s) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = cj_hexval(s[k]);
        v = v * 16 + (unsigned)(h < 0 ? 0 : h);
    }
    return v;
}

size_t cj_unescape(uint8_t *dst, const uint8_t *src, size_t n) {
    size_t i = 0, o = 0;
    while (i < n) {
        const uint8_t *bs = memchr(src + i, '\\', n - i);
        size_t run = bs ? (size_t)(bs - (src + i)) : n - i;
        memcpy(dst + o, src + i, run);
        o += run;
        i += run;
        if (i + 1 >= n) break;   /* no backslash left (or a dangling one: not from cj_parse) */
        uint8_t e = src[i + 1];
        i += 2;
        switch (e) {
        case 'b': dst[o++] = '\b'; break;
        case 'f': dst[o++] = '\f'; break;
        case 'n': dst[o++] = '\n'; break;
        case 'r': dst[o++] = '\r'; break;
        case 't': dst[o++] = '\t'; break;
        case 'u': {
            if (i + 4 > n) return o;
            unsigned cp = hex4(src + i);
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= n && src[i] == '\\' && src[i + 1] == 'u') {
                unsigned lo = hex4(src + i + 2);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;   /* unreachable after cj_parse */
            o += put_utf8(dst + o, cp);
            break;
        }
        default: dst[o++] = e; break;   /* '"', '\\', '/' */
        }
    }
    return o;
}

/* What each byte becomes inside a JSON string: 0 = itself, else the escape's second char
 * ('u' for \u00XX). */
static const uint8_t esc_class[256] = {
    ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't',
    [0x00] = 'u', [0x01] = 'u', [0x02] = 'u', [0x03] = 'u', [0x04] = 'u', [0x05] = 'u',
    [0x06] = 'u', [0x07] = 'u', [0x0B] = 'u', [0x0E] = 'u', [0x0F] = 'u', [0x10] = 'u',
    [0x11] = 'u', [0x12] = 'u', [0x13] = 'u', [0x14] = 'u', [0x15] = 'u', [0x16] = 'u',
    [0x17] = 'u', [0x18] = 'u', [0x19] = 'u', [0x1A] = 'u', [0x1B] = 'u', [0x1C] = 'u',
    [0x1D] = 'u', [0x1E] = 'u', [0x1F] = 'u',
    ['"'] = '"', ['\\'] = '\\',
};

size_t cj_escape_prefix(const uint8_t *src, size_t n) {
    size_t i = 0;
    while (i + 8 <= n && cj_special8(cj_load8(src + i)) == 0) i += 8;
    while (i < n && esc_class[src[i]] == 0) i++;
    return i;
}

size_t cj_escape_len(const uint8_t *src, size_t n) {
    size_t extra = 0, i = 0;
    for (;;) {
        i += cj_escape_prefix(src + i, n - i);
        if (i >= n) break;
        extra += esc_class[src[i]] == 'u' ? 5 : 1;
        i++;
    }
    return n + extra;
}

size_t cj_escape(uint8_t *dst, const uint8_t *src, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t i = 0, o = 0;
    for (;;) {
        size_t run = cj_escape_prefix(src + i, n - i);
        memcpy(dst + o, src + i, run);
        o += run;
        i += run;
        if (i >= n) break;
        uint8_t c = src[i++], e = esc_class[c];
        dst[o++] = '\\';
        dst[o++] = e;
        if (e == 'u') {
            dst[o++] = '0';
            dst[o++] = '0';
            dst[o++] = (uint8_t)hex[c >> 4];
            dst[o++] = (uint8_t)hex[c & 15];
        }
    }
    return o;
}

/* ASCII runs are skipped 8 bytes at a time. */

int cj_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n && (cj_load8(s + i) & CJ_HIGHS) == 0) { i += 8; continue; }
        if (s[i] < 0x80) { i++; continue; }
        size_t k = cj_utf8_seq(s, i, n);
        if (k == 0) return 0;
        i += k;
    }
    return 1;
}
