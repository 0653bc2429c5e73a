#if canImport(Glibc)
import Glibc
#endif

/// Waits for SIGINT or SIGTERM on the calling thread (`sigwait`), after blocking them in the
/// process so no other thread takes them. Call `block()` first thing in `main`, before any thread
/// starts, so every thread inherits the mask.
public enum Signals {
    public static func block() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
    }

    /// Restores the default SIGINT/SIGTERM behaviour (end the process) for verbs that run until
    /// interrupted without anything to shut down, such as `moonbase logs -f`.
    public static func unblock() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// Blocks until SIGINT or SIGTERM arrives; returns the signal number.
    public static func waitForTermination() -> Int32 {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGTERM)
        var sig: Int32 = 0
        sigwait(&set, &sig)
        return sig
    }

    /// Once shutdown has begun: a thread that ends the process with `code` if shutdown has not
    /// finished within `millis`, or at once on a second SIGINT/SIGTERM, so that nothing (a job
    /// stuck in C, a wait for the SQLite writer) can keep the process alive past its grace.
    public static func exitDeadline(afterMillis millis: Int, code: Int32) {
        let ctx = UnsafeMutablePointer<Int>.allocate(capacity: 2)
        ctx[0] = millis
        ctx[1] = Int(code)
        var tid = pthread_t()
        if pthread_create(&tid, nil, { raw in
            let p = raw!.assumingMemoryBound(to: Int.self)
            let millis = p[0], code = Int32(p[1])
            p.deallocate()
            var set = sigset_t()
            sigemptyset(&set)
            sigaddset(&set, SIGINT)
            sigaddset(&set, SIGTERM)
            var ts = timespec(tv_sec: millis / 1000, tv_nsec: (millis % 1000) * 1_000_000)
            let sig = sigtimedwait(&set, nil, &ts)
            let why = sig > 0 ? "a second signal arrived" : "shutdown did not finish in time"
            let line = "moonbase: \(why); exiting now with status \(code)\n"
            _ = line.withCString { write(2, $0, strlen($0)) }
            _exit(code)
        }, ctx) == 0 {
            pthread_detach(tid)
        } else {
            ctx.deallocate()
        }
    }
}
