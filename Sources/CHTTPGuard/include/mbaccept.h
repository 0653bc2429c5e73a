#ifndef MB_ACCEPT_H
#define MB_ACCEPT_H
#include <stdint.h>
#include <microhttpd.h>

/* The listening socket and the thread that accepts on it, handing every connection to a
 * libmicrohttpd daemon started with MHD_USE_NO_LISTEN_SOCKET (accept.c says why). */
typedef struct mb_acceptor mb_acceptor;

/* Binds `host` (a numeric IPv4 or IPv6 address; NULL or "" for every IPv4 address) and `port`
 * (0: any free port) with SO_REUSEADDR, and listens. NULL with errno set on failure
 * (EINVAL: not a numeric address). */
mb_acceptor *mb_acceptor_open(const char *host, uint16_t port, int backlog);

/* The bound port. */
uint16_t mb_acceptor_port(const mb_acceptor *a);

/* Starts the accepting thread ("mb-accept"): each connection goes to `daemon` through
 * MHD_add_connection. 0 on success, an errno value otherwise. */
int mb_acceptor_start(mb_acceptor *a, struct MHD_Daemon *daemon);

/* Stops accepting and joins the thread; new connections then wait in the listen backlog until
 * mb_acceptor_close. Idempotent. */
void mb_acceptor_stop(mb_acceptor *a);

/* Stops (if needed), closes the listening socket and frees `a`. */
void mb_acceptor_close(mb_acceptor *a);

#endif
