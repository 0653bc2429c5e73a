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
}
