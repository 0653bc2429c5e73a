#if canImport(Glibc)
import Glibc
#endif

/// Plain pthreads for the scheduler: the timer thread and one thread per job run.
///
/// Not libdispatch: dispatch threads block signals, and the Lua watchdog interrupts scripts with
/// a signal (libdispatch threads block them), so runs need threads whose mask we control. The default stack
/// (8 MiB on Debian) leaves Lua's C stack room.
enum JobThread {
    private final class Body: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    /// Starts a detached thread running `body`. Returns false if the system refused.
    @discardableResult
    static func spawn(_ body: @escaping @Sendable () -> Void) -> Bool {
        let box = Unmanaged.passRetained(Body(body)).toOpaque()
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, { arg in
            let body = Unmanaged<Body>.fromOpaque(arg!).takeRetainedValue()
            body.run()
            return nil
        }, box)
        if rc != 0 {
            Unmanaged<Body>.fromOpaque(box).release()
            return false
        }
        pthread_detach(tid)
        return true
    }
}

/// A wake-up call for the timer thread: `wait` sleeps up to a timeout or until `signal`.
///
/// `@unchecked Sendable`: the pthread mutex and condition are allocated once, never moved, and
/// every access to `signalled` happens with the mutex held.
final class Wakeup: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var signalled = false

    init() {
        pthread_mutex_init(mutex, nil)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        cond.deallocate()
    }

    /// Wakes a current or the next `wait`.
    func signal() {
        pthread_mutex_lock(mutex)
        signalled = true
        pthread_cond_signal(cond)
        pthread_mutex_unlock(mutex)
    }

    /// Sleeps until `signal` or `timeoutMs` (monotonic) has passed.
    func wait(timeoutMs: Int64) {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let ns = Int64(ts.tv_nsec) + max(0, timeoutMs) % 1000 * 1_000_000
        ts.tv_sec += Int(max(0, timeoutMs) / 1000) + Int(ns / 1_000_000_000)
        ts.tv_nsec = Int(ns % 1_000_000_000)
        pthread_mutex_lock(mutex)
        while !signalled {
            if pthread_cond_timedwait(cond, mutex, &ts) == ETIMEDOUT { break }
        }
        signalled = false
        pthread_mutex_unlock(mutex)
    }
}
