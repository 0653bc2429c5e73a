/* One thread accepts every connection and hands it to libmicrohttpd with MHD_add_connection,
 * instead of libmicrohttpd's I/O threads accepting on a shared listening socket.
 *
 * Why: with a thread pool, 0.9.75 puts the listening socket in every I/O thread's epoll set and
 * whichever thread wakes first accepts a whole burst. A client that opens its connections at
 * once (a load balancer's pool, wrk's 32) often lands every connection on one thread, which
 * then serves all the traffic on one core while the others idle: W1 measured 25-28k req/s in
 * those runs against 45-50k when the connections happened to split. MHD_add_connection puts a
 * connection on the pool thread chosen by its descriptor number (the next one with room), and
 * descriptors are handed out in order, so connections spread evenly whatever their timing.
 *
 * libmicrohttpd still applies its own rules to each added connection (the connection limit, the
 * per-address limit); a connection refused by them is closed at once, as when libmicrohttpd
 * accepted it itself. The daemon must use MHD_USE_ITC so that an
 * I/O thread sleeping in epoll sees the new connection (HTTPServer starts it so).
 *
 * Written by hand (a bind, a listen and an accept loop): the socket calls are the whole job and
 * no Debian library offers them in a form that would be shorter. */
#define _GNU_SOURCE
#include "mbaccept.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

struct mb_acceptor {
    int fd;                 /* listening socket (non-blocking) */
    int stop_fd;            /* eventfd: written to stop the thread */
    uint16_t port;
    struct MHD_Daemon *daemon;
    pthread_t thread;
    int running;            /* the thread was started and not yet joined */
};

mb_acceptor *mb_acceptor_open(const char *host, uint16_t port, int backlog) {
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    int family = AF_INET;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (host == NULL || host[0] == '\0' || inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        /* No host: every IPv4 address (INADDR_ANY is all zero bits, as memset left it). */
        a4->sin_family = AF_INET;
        a4->sin_port = htons(port);
        len = sizeof *a4;
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(port);
        len = sizeof *a6;
        family = AF_INET6;
    } else {
        errno = EINVAL;
        return NULL;
    }
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return NULL;
    int on = 1;
    /* As libmicrohttpd did: a restarted server can bind while old connections sit in TIME_WAIT. */
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    /* An IPv6 address listens on IPv6 only, as libmicrohttpd's MHD_USE_IPv6 without dual stack. */
    if (family == AF_INET6) (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, backlog > 0 ? backlog : SOMAXCONN) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;
    uint16_t p = port;
    if (getsockname(fd, (struct sockaddr *)&bound, &blen) == 0) {
        p = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    }
    int stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (stop_fd < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    mb_acceptor *a = calloc(1, sizeof *a);
    if (a == NULL) {
        close(fd);
        close(stop_fd);
        errno = ENOMEM;
        return NULL;
    }
    a->fd = fd;
    a->stop_fd = stop_fd;
    a->port = p;
    return a;
}

uint16_t mb_acceptor_port(const mb_acceptor *a) { return a->port; }

static void *accept_main(void *arg) {
    mb_acceptor *a = arg;
    /* Process-directed signals (SIGTERM, SIGINT) are for the threads that wait for them. */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    struct pollfd p[2] = {{.fd = a->fd, .events = POLLIN}, {.fd = a->stop_fd, .events = POLLIN}};
    int backoff = 0;   /* ms to wait after running out of descriptors */
    for (;;) {
        p[0].revents = p[1].revents = 0;
        /* After running out of descriptors, wait 10 ms (or for stop) before accepting again. */
        int n = backoff > 0 ? poll(&p[1], 1, backoff) : poll(p, 2, -1);
        if (n < 0 && errno != EINTR) break;
        if (p[1].revents) break;
        backoff = 0;
        /* Everything queued now: a burst of connections is handed out in order. */
        for (;;) {
            struct sockaddr_storage ss;
            socklen_t len = sizeof ss;
            int fd = accept4(a->fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
                /* EAGAIN: nothing left. Anything else (out of descriptors or memory above all):
                 * the queued connections wait, and we retry in 10 ms rather than spin on a
                 * socket that stays readable. */
                if (errno != EAGAIN && errno != EWOULDBLOCK) backoff = 10;
                break;
            }
            /* Closes fd itself when the daemon refuses it (its limits). */
            (void)MHD_add_connection(a->daemon, fd, (struct sockaddr *)&ss, len);
        }
    }
    return NULL;
}

int mb_acceptor_start(mb_acceptor *a, struct MHD_Daemon *daemon) {
    if (a->running) return EBUSY;
    a->daemon = daemon;
    int rc = pthread_create(&a->thread, NULL, accept_main, a);
    if (rc != 0) return rc;
    (void)pthread_setname_np(a->thread, "mb-accept");
    a->running = 1;
    return 0;
}

void mb_acceptor_stop(mb_acceptor *a) {
    if (!a->running) return;
    uint64_t one = 1;
    ssize_t w;
    do { w = write(a->stop_fd, &one, sizeof one); } while (w < 0 && errno == EINTR);
    pthread_join(a->thread, NULL);
    a->running = 0;
}

void mb_acceptor_close(mb_acceptor *a) {
    if (a == NULL) return;
    mb_acceptor_stop(a);
    close(a->fd);
    close(a->stop_fd);
    free(a);
}
