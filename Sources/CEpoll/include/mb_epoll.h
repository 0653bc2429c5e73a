#ifndef MB_EPOLL_H
#define MB_EPOLL_H
#include <stdint.h>
#include <sys/types.h>

/* epoll and eventfd for the WebSocket loop: Glibc's Swift module does not export
 * <sys/epoll.h> or <sys/eventfd.h>. Only MoonbaseLiveQuery imports this module. */

#define MB_EV_IN  0x001u
#define MB_EV_OUT 0x004u
#define MB_EV_ERR 0x008u
#define MB_EV_HUP 0x010u
#define MB_EV_RDHUP 0x2000u

typedef struct mb_event {
    uint32_t events;
    uint64_t token;
} mb_event;

/** A close-on-exec epoll instance, or -1. */
int mb_epoll_create(void);
/** Adds fd (edge-triggered when `edge`) for `events`, reported with `token`. 0 or -errno. */
int mb_epoll_add(int ep, int fd, uint32_t events, int edge, uint64_t token);
/** Changes the interest set of fd. 0 or -errno. */
int mb_epoll_mod(int ep, int fd, uint32_t events, int edge, uint64_t token);
/** Removes fd. 0 or -errno. */
int mb_epoll_del(int ep, int fd);
/** Waits up to timeout_ms (-1 forever); returns the number of events, 0, or -errno (EINTR too). */
int mb_epoll_wait(int ep, mb_event *out, int max, int timeout_ms);

/** A non-blocking, close-on-exec eventfd, or -1. */
int mb_eventfd(void);
/** Adds one to the eventfd (wakes its loop). */
void mb_eventfd_signal(int fd);
/** Resets the eventfd to zero. */
void mb_eventfd_drain(int fd);

/** Non-blocking recv/send on a socket: bytes, 0 at EOF (recv), or -errno. send never raises SIGPIPE. */
ssize_t mb_sock_recv(int fd, void *buf, size_t len);
ssize_t mb_sock_send(int fd, const void *buf, size_t len, int more);
/** Makes fd non-blocking and sets TCP_NODELAY (events are small and latency matters). */
void mb_sock_prepare(int fd);
/** Bytes queued in the kernel's send buffer, not yet acknowledged (SIOCOUTQ), or -1. */
int mb_sock_outq(int fd);

/** Returns freed heap pages to the system (malloc_trim(0)). */
void mb_malloc_trim(void);

#endif
