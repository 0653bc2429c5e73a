#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <signal.h>
#include <pthread.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <errno.h>
#include <linux/futex.h>
#include <microhttpd.h>

/* Static-inline shims over libmicrohttpd's variadic entry points (Swift cannot call C
 * variadics) and a few socket helpers. Only MoonbaseHTTP imports this module. */

/** MHD_OPTION_URI_LOG_CALLBACK's callback type (the header only documents it). */
typedef void *(*mb_uri_log_callback)(void *cls, const char *uri, struct MHD_Connection *con);

/** Everything `mb_mhd_start` passes to MHD_start_daemon. The daemon has no listening socket:
 * connections come from our accepting thread by MHD_add_connection (CHTTPGuard's accept.c). */
typedef struct mb_mhd_options {
    unsigned int flags;
    unsigned int thread_pool;    /* <= 1: a single internal polling thread */
    unsigned int connection_limit;
    unsigned int per_ip_limit;   /* 0 = no per-address cap */
    unsigned int timeout_seconds;
    size_t memory_limit;         /* per-connection memory pool (must exceed the header limit) */
    size_t memory_increment;
    MHD_AccessHandlerCallback access_cb;
    void *access_cls;
    MHD_RequestCompletedCallback completed_cb;
    void *completed_cls;
    mb_uri_log_callback uri_log_cb;
    void *uri_log_cls;
    MHD_NotifyConnectionCallback connection_cb;
    void *connection_cls;
} mb_mhd_options;

/** Starts the daemon; NULL when MHD fails (threads, memory). */
static inline struct MHD_Daemon *mb_mhd_start(const mb_mhd_options *o) {
    struct MHD_OptionItem ops[11];
    int n = 0;
    ops[n++] = (struct MHD_OptionItem){ MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)o->completed_cb, o->completed_cls };
    ops[n++] = (struct MHD_OptionItem){ MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)o->uri_log_cb, o->uri_log_cls };
    ops[n++] = (struct MHD_OptionItem){ MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)o->connection_cb, o->connection_cls };
    ops[n++] = (struct MHD_OptionItem){ MHD_OPTION_CONNECTION_LIMIT, (intptr_t)o->connection_limit, NULL };
    if (o->per_ip_limit > 0) ops[n++] = (struct MHD_OptionItem){ MHD_OPTION_PER_IP_CONNECTION_LIMIT, (intptr_t)o->per_ip_limit, NULL };
    ops[n++] = (struct MHD_OptionItem){ MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)o->timeout_seconds, NULL };
    ops[n++] = (struct MHD_OptionItem){ MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)o->memory_limit, NULL };
    ops[n++] = (struct MHD_OptionItem){ MHD_OPTION_CONNECTION_MEMORY_INCREMENT, (intptr_t)o->memory_increment, NULL };
    if (o->thread_pool > 1) ops[n++] = (struct MHD_OptionItem){ MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)o->thread_pool, NULL };
    ops[n] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
    return MHD_start_daemon(o->flags | MHD_USE_NO_LISTEN_SOCKET, 0, NULL, NULL,
                            o->access_cb, o->access_cls,
                            MHD_OPTION_ARRAY, ops, MHD_OPTION_END);
}

/** Ends the request target just after its '?', in libmicrohttpd's own read buffer.
 * libmicrohttpd 0.9.75 splits the query into GET arguments right after the URI log callback,
 * one entry of its per-connection memory pool per `&`-separated piece: a few hundred
 * parameters (a 2 KB query) exhaust the pool and the request is never answered. Moonbase
 * parses the query itself from the raw target copied in that callback, so libmicrohttpd's
 * copy is not needed; hiding it leaves the pool to the headers. */
static inline void mb_mhd_hide_query(const char *uri) {
    char *q = strchr(uri, '?');
    if (q != NULL && q[1] != '\0') q[1] = '\0';
}

/** The socket context set in the connection-notify callback. */
static inline void *mb_mhd_socket_context(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i != NULL ? i->socket_context : NULL;
}

/** The connection's socket, or -1. */
static inline int mb_mhd_connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return i != NULL ? (int)i->connect_fd : -1;
}

/** Writes the numeric address of `sa` into buf (NUL-terminated); returns its length or 0. */
static inline size_t mb_sockaddr_ip(const struct sockaddr *sa, char *buf, size_t len) {
    const char *r = NULL;
    if (sa == NULL || len == 0) return 0;
    if (sa->sa_family == AF_INET) {
        r = inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
    } else if (sa->sa_family == AF_INET6) {
        r = inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)len);
    }
    if (r == NULL) { buf[0] = '\0'; return 0; }
    return strlen(buf);
}

/** Writes the client's numeric address into buf (NUL-terminated); returns its length or 0. */
static inline size_t mb_mhd_client_ip(struct MHD_Connection *c, char *buf, size_t len) {
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (i == NULL || len == 0) return 0;
    return mb_sockaddr_ip(i->client_addr, buf, len);
}

/** Unblocks one signal on the calling thread (worker threads take the Lua watchdog's SIGURG). */
static inline int mb_unblock_signal(int sig) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    return pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* A one-waiter parking word for the worker pool: 0 = armed, 1 = woken, 2 = asleep in the
 * kernel. The waiter spins up to `spin_ns` before sleeping; the waker makes a futex call only
 * when the waiter really sleeps, so waking a worker that is still spinning costs one atomic
 * exchange. */

/** Arms the word before the owner advertises itself as idle (under the pool's mutex). */
static inline void mb_parker_arm(uint32_t *w) { __atomic_store_n(w, 0, __ATOMIC_RELAXED); }

static inline void mb_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline uint64_t mb_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/** Waits until `mb_parker_wake`: spins up to `spin_ns`, then sleeps on the futex. */
static inline void mb_parker_wait(uint32_t *w, uint64_t spin_ns) {
    if (spin_ns > 0) {
        uint64_t end = mb_mono_ns() + spin_ns;
        for (unsigned i = 1;; i++) {
            if (__atomic_load_n(w, __ATOMIC_ACQUIRE) == 1) return;
            mb_cpu_relax();
            if ((i & 31) == 0 && mb_mono_ns() >= end) break;
        }
    }
    for (;;) {
        uint32_t expected = 0;
        if (!__atomic_compare_exchange_n(w, &expected, 2, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
            if (expected == 1) return;
        }
        /* Returns at once if the word is no longer 2; a spurious wake-up loops. */
        syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    }
}

/** Wakes the word's waiter; a futex call only if it is asleep. */
static inline void mb_parker_wake(uint32_t *w) {
    if (__atomic_exchange_n(w, 1, __ATOMIC_RELEASE) == 2) {
        syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/** The calling thread's kernel thread id (for per-thread scheduling calls). */
static inline int32_t mb_gettid(void) { return (int32_t)syscall(SYS_gettid); }

/** Sets one thread's nice value (on Linux, PRIO_PROCESS with a thread id names that thread
 * alone). Returns 0 or the errno: an unprivileged process may raise a nice value but not lower it
 * again (EACCES/EPERM) unless RLIMIT_NICE allows it. */
static inline int mb_set_thread_nice(int32_t tid, int nice) {
    return setpriority(PRIO_PROCESS, (id_t)tid, nice) == 0 ? 0 : errno;
}

/** Reads /proc/self/task/<tid>/<name> into buf (NUL-terminated); the byte count, or -1. */
static inline ssize_t mb_read_task_file(int32_t tid, const char *name, char *buf, size_t cap) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    return n;
}

/** One thread's scheduler counters from /proc/self/task/<tid>/schedstat: nanoseconds on a CPU
 * and nanoseconds runnable but waiting for one. The difference from wall time is time asleep
 * (a lock, a socket, a sleep), which the thread's CPU clock alone cannot tell apart from time
 * spent waiting for a busy CPU. Returns 0, or -1 when the file cannot be read. */
static inline int mb_thread_schedstat(int32_t tid, uint64_t *run_ns, uint64_t *wait_ns) {
    char buf[96];
    if (mb_read_task_file(tid, "schedstat", buf, sizeof buf) < 0) return -1;
    unsigned long long run = 0, wait = 0;
    if (sscanf(buf, "%llu %llu", &run, &wait) != 2) return -1;
    *run_ns = run;
    *wait_ns = wait;
    return 0;
}

/** One thread's scheduler state letter from /proc/self/task/<tid>/stat ('R' running or
 * runnable, 'S' asleep, 'D' in an uninterruptible wait, ...), or 0 when it cannot be read. The
 * counters of `mb_thread_schedstat` add a wait for a CPU only once the thread gets one, so a
 * thread queued for a CPU right now looks idle there; its state says 'R'. */
static inline char mb_thread_state(int32_t tid) {
    char buf[256];
    if (mb_read_task_file(tid, "stat", buf, sizeof buf) < 0) return 0;
    /* "tid (comm) S ...": the name may hold spaces and parentheses, so take the last ')'. */
    char *close_paren = strrchr(buf, ')');
    if (!close_paren || close_paren[1] != ' ') return 0;
    return close_paren[2];
}

/** The calling thread's nice value. */
static inline int mb_thread_nice(void) {
    errno = 0;
    return getpriority(PRIO_PROCESS, (id_t)mb_gettid());
}

/** Hands an upgraded socket back to libmicrohttpd, which closes it (MHD_upgrade_action is variadic). */
static inline enum MHD_Result mb_mhd_upgrade_close(struct MHD_UpgradeResponseHandle *urh) {
    return MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

/** A close-on-exec duplicate of an upgraded socket's descriptor, or -1 (errno set).
 * libmicrohttpd keeps an upgraded connection, with its whole per-connection memory pool, until
 * the upgrade handle is closed. Without TLS, closing the handle makes it only close(2) its own
 * descriptor (no shutdown(2), and the connection left its epoll set when it was suspended for
 * the upgrade), so a duplicate taken first keeps the socket open for its new owner while
 * libmicrohttpd frees the connection at once. */
static inline int mb_dup_cloexec(int fd) {
    return fcntl(fd, F_DUPFD_CLOEXEC, 0);
}
