// libpq (Debian libpq-dev) for the PostgreSQL backend. Only MoonbasePostgres imports this module.
// The diagnostic field codes are character macros Swift does not import: these wrappers name them.
#include <libpq-fe.h>
#include <poll.h>

static inline const char *mb_pq_sqlstate(const PGresult *r) { return PQresultErrorField(r, PG_DIAG_SQLSTATE); }
static inline const char *mb_pq_primary_message(const PGresult *r) { return PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY); }

// Notices ("relation already exists, skipping") would go to stderr by default: they are not errors.
static void mb_pq_ignore_notice(void *arg, const char *message) { (void)arg; (void)message; }
static inline void mb_pq_silence_notices(PGconn *c) { PQsetNoticeProcessor(c, mb_pq_ignore_notice, NULL); }
