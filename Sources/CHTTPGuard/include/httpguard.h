#ifndef MB_HTTPGUARD_H
#define MB_HTTPGUARD_H
#include <microhttpd.h>
#include "mbaccept.h"

/* Queues one of Moonbase's own responses (bypasses the error-body rewrite below). */
enum MHD_Result mb_queue_app_response(struct MHD_Connection *connection, unsigned int status,
                                      struct MHD_Response *response);

/* 1 when the real MHD_queue_response was found behind the interposer (checked at start). */
int mb_guard_ready(void);

/* Error answers libmicrohttpd sent itself, by status class (diagnostics, /metrics). */
unsigned long mb_guard_rewritten(void);
/* Requests with a malformed Content-Length closed without an answer. */
unsigned long mb_guard_closed_bad_length(void);

#endif
