/* UTF-8 validation (RFC 3629): ASCII runs are skipped 8 bytes at a time. */
#include "cj_internal.h"

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
