#define _GNU_SOURCE
#include "mb_epoll.h"
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <unistd.h>
#include <malloc.h>

int mb_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

static int ctl(int ep, int op, int fd, uint32_t events, int edge, uint64_t token) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = events | (edge ? EPOLLET : 0);
    ev.data.u64 = token;
    return epoll_ctl(ep, op, fd, &ev) == 0 ? 0 : -errno;
}

int mb_epoll_add(int ep, int fd, uint32_t events, int edge, uint64_t token) {
    return ctl(ep, EPOLL_CTL_ADD, fd, events, edge, token);
}

int mb_epoll_mod(int ep, int fd, uint32_t events, int edge, uint64_t token) {
    return ctl(ep, EPOLL_CTL_MOD, fd, events, edge, token);
}

int mb_epoll_del(int ep, int fd) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    return epoll_ctl(ep, EPOLL_CTL_DEL, fd, &ev) == 0 ? 0 : -errno;
}

int mb_epoll_wait(int ep, mb_event *out, int max, int timeout_ms) {
    struct epoll_event evs[256];
    if (max > 256) max = 256;
    int n = epoll_wait(ep, evs, max, timeout_ms);
    if (n < 0) return -errno;
    for (int i = 0; i < n; i++) {
        out[i].events = evs[i].events;
        out[i].token = evs[i].data.u64;
    }
    return n;
}

int mb_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

void mb_eventfd_signal(int fd) {
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof one);
    (void)r;
}

void mb_eventfd_drain(int fd) {
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
}

ssize_t mb_sock_recv(int fd, void *buf, size_t len) {
    for (;;) {
        ssize_t n = recv(fd, buf, len, 0);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        return -errno;
    }
}

ssize_t mb_sock_send(int fd, const void *buf, size_t len, int more) {
    for (;;) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        return -errno;
    }
}

void mb_sock_prepare(int fd) {
    int fl = fcntl(fd, F_GETFL, 0);
    if (fl >= 0 && !(fl & O_NONBLOCK)) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int mb_sock_outq(int fd) {
    int v = 0;
    return ioctl(fd, SIOCOUTQ, &v) == 0 ? v : -1;
}

void mb_malloc_trim(void) { malloc_trim(0); }
