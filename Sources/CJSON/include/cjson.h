/*
 * CJSON: the byte-level JSON machinery shared by the REST layer (MoonbaseJSON, the only Swift
 * importer) and the Lua bridge (CLuaBridge/lb_json.c). One C codec on the hot path.
 *
 * Reading: cj_parse() validates a whole document (RFC 8259, UTF-8 included) in one pass and
 * writes a flat tape of tokens into caller-owned storage; consumers walk the tape and build their
 * own values (JSONValue, Lua tables) with cj_unescape() and cj_number(). Nothing here allocates:
 * when the storage is too small the document is still validated and the exact number of tokens
 * it needs is reported, so the caller can retry with storage it owns (Swift memory, a Lua
 * userdata counted by the VM's allocator).
 *
 * Writing: cj_escape() (runs of safe bytes copied with memcpy), cj_format_double() (shortest
 * text that reads back to the same double), cj_format_int().
 *
 * Decisions: a UTF-8 byte order mark is refused (RFC 8259 §8.1 forbids sending one; a parser
 * "may" ignore it; we treat it as an unexpected character so bodies are taken byte-exact).
 * Any value is accepted at the top level. Duplicate keys are reported as they come.
 */
#ifndef MOONBASE_CJSON_H
#define MOONBASE_CJSON_H
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ tape */

/* Token types (cj_tok.type). */
#define CJ_NULL 0
#define CJ_FALSE 1
#define CJ_TRUE 2
#define CJ_NUMBER 3
#define CJ_STRING 4
#define CJ_ARRAY 5
#define CJ_OBJECT 6

/* Token flags (cj_tok.flags). */
#define CJ_F_ESCAPED 1   /* a string containing at least one backslash escape */
#define CJ_F_INTEGER 2   /* a number without fraction or exponent */

/* Result of cj_parse(). */
#define CJ_OK 0
#define CJ_ESYNTAX 1     /* invalid document: t->err, t->err_off */
#define CJ_EFULL 2       /* valid, but needs t->count tokens (more than t->cap) */

/* Default nesting limit of the REST layer (arrays and objects open at once). */
#define CJ_MAX_DEPTH 512
/* Hard cap on the max_depth argument (the container stack lives on the C stack). */
#define CJ_DEPTH_CAP 1024

/* One token, 16 bytes. Tokens are in document order: a container is followed by its children
 * (for an object: key string, value, key string, value, ...). */
typedef struct cj_tok {
    uint8_t type;      /* CJ_NULL ... CJ_OBJECT */
    uint8_t flags;     /* CJ_F_* */
    uint16_t reserved;
    uint32_t off;      /* string: first byte after the opening quote; others: first byte */
    uint32_t len;      /* string: raw byte length between the quotes (escapes undecoded);
                          number / literal: text length; array: elements; object: members */
    uint32_t next;     /* index of the first token after this value and all its children */
} cj_tok;

/* Caller-owned tape. Set toks/cap, then call cj_parse. */
typedef struct cj_tape {
    cj_tok *toks;      /* storage for cap tokens (may be NULL when cap is 0) */
    uint32_t cap;
    uint32_t count;    /* tokens written; on CJ_EFULL the number the document needs */
    uint32_t err_off;  /* CJ_ESYNTAX: byte offset of the problem */
    const char *err;   /* CJ_ESYNTAX: static message ("unexpected character", ...) */
} cj_tape;

/* Validates s[0..n) as one JSON text (white space around it allowed) and fills the tape.
 * max_depth bounds the number of containers open at once (clamped to CJ_DEPTH_CAP).
 * Documents of 4 GiB or more are refused. Never allocates, never recurses. */
int cj_parse(cj_tape *t, const uint8_t *s, size_t n, unsigned max_depth);

/* Decodes the raw content of a CJ_F_ESCAPED string token (validated by cj_parse) into dst,
 * which must hold n bytes (the decoded text is never longer). Returns the decoded length. */
size_t cj_unescape(uint8_t *dst, const uint8_t *src, size_t n);

/* Number readers: cj_number's results. */
#define CJ_NUM_INT 0     /* *iv holds the exact value (integer literal that fits in int64) */
#define CJ_NUM_DOUBLE 1  /* *dv holds the nearest double (also integers beyond int64) */
#define CJ_NUM_RANGE 2   /* magnitude too large for a double: *dv is +/-HUGE_VAL */

/* Reads the text of a CJ_NUMBER token (validated by cj_parse). "-0" is the integer 0. */
int cj_number(const uint8_t *s, size_t n, int64_t *iv, double *dv);

/* The "latitude" and "longitude" numbers of the object member `key` (raw bytes, no escapes) of
 * the JSON object s[0..n), as json_extract(s, '$.key.latitude') and '$.key.longitude' read them
 * (first member with a key wins). Returns 1 and sets both, or 0 when either is missing or not a
 * number. One pass without validating (for text our serializer wrote); never reads outside s. */
int cj_point(const uint8_t *s, size_t n, const uint8_t *key, size_t klen, double *lat, double *lng);

/* ------------------------------------------------------------------ output */

/* Length of the leading run of src that needs no escaping inside a JSON string. */
size_t cj_escape_prefix(const uint8_t *src, size_t n);

/* Exact length of cj_escape's output for src (without quotes). */
size_t cj_escape_len(const uint8_t *src, size_t n);

/* Writes the escaped body of a JSON string (no quotes) into dst, which must hold
 * cj_escape_len(src, n) bytes (6 * n always suffices). '"' and '\\' are backslashed,
 * \b \f \n \r \t use their short forms, other control bytes \u00XX; everything else
 * (including UTF-8 sequences, which the caller vouches for) is copied. Returns the length. */
size_t cj_escape(uint8_t *dst, const uint8_t *src, size_t n);

/* Writes the shortest decimal text that reads back as the finite double d into out (at least
 * CJ_DOUBLE_MAX bytes, NUL-terminated) and returns its length. Fixed notation for
 * 1e-4 <= |d| < 1e15 ("0.1", "40.73612", integral values without a fraction: "3"); otherwise
 * printf's %g style ("1e+20", "1.5e-07", "-0"). */
#define CJ_DOUBLE_MAX 32
size_t cj_format_double(double d, char *out);

/* Writes v in decimal into out (at least 21 bytes, not NUL-terminated); returns the length. */
size_t cj_format_int(int64_t v, char *out);

/* ------------------------------------------------------------------ UTF-8 */

/* Returns 1 when buf[0..len) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF), else 0
 * (used by the Lua bridge before handing strings to JSON and by the HTTP layer for bodies). */
int cj_utf8_valid(const uint8_t *buf, size_t len);

#endif
