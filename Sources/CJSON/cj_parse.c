/*
 * cj_parse: one pass over a JSON text, full RFC 8259 validation, a flat tape of tokens.
 *
 * An explicit stack of open containers replaces recursion, so the depth limit costs 4 bytes a
 * level of C stack. Tokens past the caller's capacity are counted, not written, so a too-small
 * tape still yields a complete validation and the exact size to retry with.
 */
#include "cj_internal.h"

typedef struct {
    cj_tape *t;
    const uint8_t *s;
    size_t n;
} parser;

static int fail(parser *p, const char *what, size_t off) {
    p->t->err = what;
    p->t->err_off = (uint32_t)off;
    return CJ_ESYNTAX;
}

static inline size_t skip_ws(const uint8_t *s, size_t i, size_t n) {
    while (i < n) {
        uint8_t c = s[i];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
        i++;
    }
    return i;
}

/* Appends a token (or only counts it when the tape is full); returns its index. */
static inline uint32_t emit(parser *p, uint8_t type, uint8_t flags, size_t off, size_t len) {
    cj_tape *t = p->t;
    uint32_t k = t->count++;
    if (k < t->cap) {
        cj_tok *tok = &t->toks[k];
        tok->type = type;
        tok->flags = flags;
        tok->reserved = 0;
        tok->off = (uint32_t)off;
        tok->len = (uint32_t)len;
        tok->next = k + 1;
    }
    return k;
}

/* Scans the string whose opening quote is at s[q]; on success stores the index after the
 * closing quote in *end and emits the token. */
static int scan_string(parser *p, size_t q, size_t *end) {
    const uint8_t *s = p->s;
    size_t n = p->n, i = q + 1;
    uint8_t flags = 0;
    for (;;) {
        while (i + 8 <= n) {
            uint64_t v = cj_load8(s + i);
            if ((cj_special8(v) | (v & CJ_HIGHS)) != 0) break;
            i += 8;
        }
        if (i >= n) return fail(p, "unterminated string", q);
        uint8_t c = s[i];
        if (c == '"') break;
        if (c < 0x20) return fail(p, "control character in string", i);
        if (c < 0x80 && c != '\\') { i++; continue; }
        if (c >= 0x80) {
            size_t k = cj_utf8_seq(s, i, n);
            if (k == 0) return fail(p, "invalid UTF-8 in string", i);
            i += k;
            continue;
        }
        /* backslash */
        flags = CJ_F_ESCAPED;
        if (i + 1 >= n) return fail(p, "unterminated string", q);
        uint8_t e = s[i + 1];
        if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
            i += 2;
            continue;
        }
        if (e != 'u') return fail(p, "bad escape", i);
        if (i + 6 > n) return fail(p, "bad \\u escape", i);
        unsigned cp = 0;
        for (int k = 2; k < 6; k++) {
            int h = cj_hexval(s[i + k]);
            if (h < 0) return fail(p, "bad \\u escape", i);
            cp = cp * 16 + (unsigned)h;
        }
        if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "unpaired surrogate", i);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (i + 12 > n || s[i + 6] != '\\' || s[i + 7] != 'u') return fail(p, "unpaired surrogate", i);
            unsigned lo = 0;
            for (int k = 8; k < 12; k++) {
                int h = cj_hexval(s[i + k]);
                if (h < 0) return fail(p, "bad \\u escape", i + 6);
                lo = lo * 16 + (unsigned)h;
            }
            if (lo < 0xDC00 || lo > 0xDFFF) return fail(p, "unpaired surrogate", i);
            i += 12;
            continue;
        }
        i += 6;
    }
    emit(p, CJ_STRING, flags, q + 1, i - (q + 1));
    *end = i + 1;
    return CJ_OK;
}

static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static int scan_number(parser *p, size_t start, size_t *end) {
    const uint8_t *s = p->s;
    size_t n = p->n, i = start;
    uint8_t flags = CJ_F_INTEGER;
    if (s[i] == '-') i++;
    if (i >= n || !is_digit(s[i])) return fail(p, "bad number", start);
    if (s[i] == '0') {
        i++;
        if (i < n && is_digit(s[i])) return fail(p, "bad number (leading zero)", start);
    } else {
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && s[i] == '.') {
        flags = 0;
        i++;
        if (i >= n || !is_digit(s[i])) return fail(p, "bad number", start);
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        flags = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !is_digit(s[i])) return fail(p, "bad number", start);
        while (i < n && is_digit(s[i])) i++;
    }
    emit(p, CJ_NUMBER, flags, start, i - start);
    *end = i;
    return CJ_OK;
}

static int scan_literal(parser *p, size_t i, const char *word, size_t len, uint8_t type, size_t *end) {
    if (p->n - i < len || memcmp(p->s + i, word, len) != 0) return fail(p, "bad literal", i);
    emit(p, type, 0, i, len);
    *end = i + len;
    return CJ_OK;
}

int cj_parse(cj_tape *t, const uint8_t *s, size_t n, unsigned max_depth) {
    parser p = {t, s, n};
    uint32_t stack[CJ_DEPTH_CAP];   /* token index of each open container */
    uint8_t closers[CJ_DEPTH_CAP];  /* its closing byte: '}' or ']' (the tape may be full) */
    unsigned depth = 0;
    if (max_depth > CJ_DEPTH_CAP) max_depth = CJ_DEPTH_CAP;
    t->count = 0;
    t->err = NULL;
    t->err_off = 0;
    if (n >= UINT32_MAX) return fail(&p, "document too large", 0);

    size_t i = skip_ws(s, 0, n);
    int rc;
value:
    if (i >= n) return fail(&p, "unexpected end of input", i);
    switch (s[i]) {
    case '{':
    case '[': {
        if (depth >= max_depth) return fail(&p, "nesting too deep", i);
        uint8_t closer = s[i] == '{' ? '}' : ']';
        uint32_t k = emit(&p, closer == '}' ? CJ_OBJECT : CJ_ARRAY, 0, i, 0);
        stack[depth] = k;
        closers[depth++] = closer;
        i = skip_ws(s, i + 1, n);
        if (i < n && s[i] == closer) {
            i++;
            goto close;
        }
        if (closer == '}') goto key;
        goto value;
    }
    case '"': rc = scan_string(&p, i, &i); break;
    case 't': rc = scan_literal(&p, i, "true", 4, CJ_TRUE, &i); break;
    case 'f': rc = scan_literal(&p, i, "false", 5, CJ_FALSE, &i); break;
    case 'n': rc = scan_literal(&p, i, "null", 4, CJ_NULL, &i); break;
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        rc = scan_number(&p, i, &i);
        break;
    default: return fail(&p, "unexpected character", i);
    }
    if (rc != CJ_OK) return rc;

after_value:
    /* A value just ended inside the innermost open container, or at the top level. */
    if (depth == 0) goto done;
    {
        uint32_t k = stack[depth - 1];
        uint8_t closer = closers[depth - 1];
        if (k < t->cap) t->toks[k].len++;
        i = skip_ws(s, i, n);
        if (i >= n) return fail(&p, "unexpected end of input", i);
        if (s[i] == ',') {
            i = skip_ws(s, i + 1, n);
            if (closer == '}') goto key;
            goto value;
        }
        if (s[i] == closer) {
            i++;
            goto close;
        }
        return fail(&p, closer == '}' ? "expected ',' or '}'" : "expected ',' or ']'", i);
    }
close:
    /* The innermost container's closing byte was just consumed. */
    {
        uint32_t k = stack[--depth];
        if (k < t->cap) t->toks[k].next = t->count;
    }
    goto after_value;
key:
    if (i >= n || s[i] != '"') return fail(&p, "expected a string key", i);
    rc = scan_string(&p, i, &i);
    if (rc != CJ_OK) return rc;
    i = skip_ws(s, i, n);
    if (i >= n || s[i] != ':') return fail(&p, "expected ':'", i);
    i = skip_ws(s, i + 1, n);
    goto value;
done:
    i = skip_ws(s, i, n);
    if (i != n) return fail(&p, "unexpected trailing data", i);
    return t->count > t->cap ? CJ_EFULL : CJ_OK;
}
