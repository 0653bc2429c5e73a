/*
 * Numbers in and out.
 *
 * Reading: integer literals accumulate exactly in 64 bits; a decimal with at most 19 significant
 * digits whose mantissa fits in 2^53 and whose power of ten is at most 22 is one exact IEEE
 * multiplication or division (Clinger's fast path, correctly rounded); everything else goes to
 * strtod on a bounded copy of the token.
 *
 * Writing: for 1e-4 <= |d| < 1e15, the fewest decimals k with round(|d| * 10^k) / 10^k == |d|
 * (both operands exact, so the division is the correctly rounded value strtod would give for
 * that text: the check proves the round trip); otherwise printf %.15g / %.16g / %.17g, the first
 * that reads back. Either way the output reads back to exactly d.
 *
 * strtod and snprintf follow LC_NUMERIC; the server never calls setlocale, so it stays "C".
 */
#include "cj_internal.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const double pow10_exact[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

static double slow_strtod(const uint8_t *s, size_t n) {
    char small[128];
    char *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf) return NAN;   /* out of memory: callers see a non-number as out of range */
    memcpy(buf, s, n);
    buf[n] = 0;
    double d = strtod(buf, NULL);
    if (buf != small) free(buf);
    return d;
}

static int double_result(double d, double *dv) {
    *dv = d;
    return isfinite(d) ? CJ_NUM_DOUBLE : CJ_NUM_RANGE;
}

int cj_number(const uint8_t *s, size_t n, int64_t *iv, double *dv) {
    size_t i = 0;
    int neg = 0;
    if (i < n && s[i] == '-') { neg = 1; i++; }
    uint64_t m = 0;
    int digits = 0;       /* significant digits accumulated in m */
    int dropped = 0;      /* nonzero digits that did not fit in m */
    int exp10 = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (digits < 19) {
            m = m * 10 + (uint64_t)(s[i] - '0');
            if (m) digits++;
        } else {
            exp10++;
            if (s[i] != '0') dropped = 1;
        }
    }
    if (i == n) {
        /* An integer literal. */
        if (!dropped && exp10 == 0) {
            if (!neg && m <= (uint64_t)INT64_MAX) { *iv = (int64_t)m; return CJ_NUM_INT; }
            if (neg && m <= (uint64_t)INT64_MAX + 1) { *iv = (int64_t)(0 - m); return CJ_NUM_INT; }
        }
        return double_result(slow_strtod(s, n), dv);
    }
    if (s[i] == '.') {
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (digits < 19) {
                m = m * 10 + (uint64_t)(s[i] - '0');
                if (m) digits++;
                exp10--;
            } else if (s[i] != '0') {
                dropped = 1;
            }
        }
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = 0, e = 0;
        if (i < n && (s[i] == '+' || s[i] == '-')) { eneg = s[i] == '-'; i++; }
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (e < 100000) e = e * 10 + (s[i] - '0');
        }
        exp10 += eneg ? -e : e;
    }
    if (!dropped && m <= (1ULL << 53) && exp10 >= -22 && exp10 <= 22) {
        double d = (double)m;
        d = exp10 < 0 ? d / pow10_exact[-exp10] : d * pow10_exact[exp10];
        *dv = neg ? -d : d;
        return CJ_NUM_DOUBLE;
    }
    return double_result(slow_strtod(s, n), dv);
}

size_t cj_format_int(int64_t v, char *out) {
    char tmp[20];
    uint64_t x = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    size_t k = 0;
    do {
        tmp[k++] = (char)('0' + x % 10);
        x /= 10;
    } while (x);
    size_t o = 0;
    if (v < 0) out[o++] = '-';
    while (k) out[o++] = tmp[--k];
    return o;
}

/* Fixed notation with the fewest decimals that read back; 0 when none up to 17 fits. */
static size_t format_fixed(double d, char *out) {
    double a = fabs(d);
    for (int k = 0; k <= 17; k++) {
        double scaled = a * pow10_exact[k];
        if (scaled >= 9007199254740992.0) return 0;   /* 2^53: no longer exact */
        double m = nearbyint(scaled);
        if (m / pow10_exact[k] != a) continue;
        char digits[24];
        size_t nd = cj_format_int((int64_t)m, digits);
        size_t o = 0;
        if (d < 0) out[o++] = '-';
        if ((size_t)k >= nd) {
            out[o++] = '0';
            out[o++] = '.';
            for (size_t z = nd; z < (size_t)k; z++) out[o++] = '0';
            memcpy(out + o, digits, nd);
            o += nd;
        } else {
            size_t whole = nd - (size_t)k;
            memcpy(out + o, digits, whole);
            o += whole;
            if (k > 0) {
                out[o++] = '.';
                memcpy(out + o, digits + whole, (size_t)k);
                o += (size_t)k;
            }
        }
        out[o] = 0;
        return o;
    }
    return 0;
}

size_t cj_format_double(double d, char *out) {
    double a = fabs(d);
    if (a >= 1e-4 && a < 1e15) {
        size_t n = format_fixed(d, out);
        if (n) return n;
    }
    int len = snprintf(out, CJ_DOUBLE_MAX, "%.15g", d);
    if (strtod(out, NULL) != d) {
        len = snprintf(out, CJ_DOUBLE_MAX, "%.16g", d);
        if (strtod(out, NULL) != d) len = snprintf(out, CJ_DOUBLE_MAX, "%.17g", d);
    }
    return (size_t)len;
}
