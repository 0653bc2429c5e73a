/* libmicrohttpd answers some malformed requests itself, before any application callback runs
 * (a bad request line, an unsupported HTTP version, a request line or header block larger than
 * its per-connection memory, broken chunked framing, a Content-Length it cannot parse), with
 * fixed HTML bodies that cannot be configured in 0.9.75. Every Moonbase answer is a Parse error
 * `{"code":N,"error":"..."}`, so this file interposes `MHD_queue_response`: libmicrohttpd calls
 * it through its PLT for those answers, and a definition in our executable takes precedence.
 * Moonbase's own responses go through `mb_queue_app_response`, which calls the real function
 * directly, so only libmicrohttpd's own answers are rewritten.
 *
 * One case cannot be answered correctly: for a Content-Length that libmicrohttpd cannot parse
 * (`abc`, `-1`, 2^64 and above), 0.9.75 builds the response head twice (the status line and
 * headers appear twice on the wire, which breaks HTTP framing for the client). Refusing to
 * queue that answer makes libmicrohttpd close the connection instead: a clean close beats a
 * corrupt answer. A Content-Length that parses but exceeds the body limit still gets
 * Moonbase's own 413. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include "httpguard.h"

typedef enum MHD_Result (*mb_queue_fn)(struct MHD_Connection *, unsigned int, struct MHD_Response *);

static mb_queue_fn real_queue;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;
static unsigned long rewritten, closed_bad_length;

static void resolve_real(void) {
    real_queue = (mb_queue_fn)dlsym(RTLD_NEXT, "MHD_queue_response");
}

enum MHD_Result mb_queue_app_response(struct MHD_Connection *c, unsigned int status, struct MHD_Response *r) {
    pthread_once(&real_once, resolve_real);
    return real_queue(c, status, r);
}

int mb_guard_ready(void) {
    pthread_once(&real_once, resolve_real);
    return real_queue != NULL && real_queue != MHD_queue_response;
}

unsigned long mb_guard_rewritten(void) { return __atomic_load_n(&rewritten, __ATOMIC_RELAXED); }
unsigned long mb_guard_closed_bad_length(void) { return __atomic_load_n(&closed_bad_length, __ATOMIC_RELAXED); }

/* libmicrohttpd's rule for Content-Length: decimal digits only, no overflow of 64 bits. */
static int content_length_malformed(struct MHD_Connection *c) {
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (v == NULL) return 0;
    if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL) return 0;
    if (*v == '\0') return 1;
    unsigned long long n = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9') return 1;
        unsigned d = (unsigned)(*p - '0');
        if (n > (~0ULL - d) / 10) return 1;
        n = n * 10 + d;
    }
    return 0;
}

#define MB_BODY(code, msg) "{\"code\":" #code ",\"error\":\"" msg "\"}"

static const char *body_for(unsigned int status) {
    switch (status) {
    case 400: return MB_BODY(107, "malformed HTTP request");
    case 413: return MB_BODY(130, "request entity too large");
    case 414: return MB_BODY(107, "request URI too long");
    case 431: return MB_BODY(107, "request headers too large");
    case 505: return MB_BODY(107, "HTTP version not supported");
    case 501: return MB_BODY(107, "not implemented");
    case 500: return MB_BODY(1, "internal error");
    case 503: return MB_BODY(1, "server busy");
    default: return status >= 500 ? MB_BODY(1, "internal error") : MB_BODY(107, "bad request");
    }
}

enum MHD_Result MHD_queue_response(struct MHD_Connection *c, unsigned int status, struct MHD_Response *r) {
    pthread_once(&real_once, resolve_real);
    if (status < 400) return real_queue(c, status, r);
    if ((status == 400 || status == 413) && content_length_malformed(c)) {
        __atomic_add_fetch(&closed_bad_length, 1, __ATOMIC_RELAXED);
        return MHD_NO;
    }
    const char *body = body_for(status);
    struct MHD_Response *mine = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (mine == NULL) return real_queue(c, status, r);
    MHD_add_response_header(mine, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json; charset=utf-8");
    MHD_add_response_header(mine, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = real_queue(c, status, mine);
    MHD_destroy_response(mine);
    __atomic_add_fetch(&rewritten, 1, __ATOMIC_RELAXED);
    return ret;
}
