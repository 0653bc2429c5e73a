import CHTTPGuard
import CMicroHTTPD
import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The header-completion deadline: a client must finish sending a request's head (request
/// line and headers) within `headerTimeoutSeconds`, however it spreads the bytes.
///
/// libmicrohttpd's idle timeout restarts with every byte received, so a client that sends one
/// byte every few seconds (a "slow sender") holds its connection slot for as long as it likes,
/// and a thousand of them starve everyone else. libmicrohttpd 0.9.75 has no deadline of its
/// own, so Moonbase keeps one per connection:
/// - a new connection must deliver its first head within the timeout;
/// - after an answer, a kept-alive connection may stay idle for the idle timeout, and once its
///   next request line arrives the rest of the head is due within the timeout;
/// - from the first access-handler call to the answer there is no deadline (bodies and
///   handlers have their own limits).
/// A sweeper thread checks the registered connections a few times a second and shuts down the
/// socket of each one past its deadline (`shutdown(2)`: libmicrohttpd then sees the
/// connection end and closes it on its own thread, as for a client that went away). A slot is
/// thus held at most `headerTimeoutSeconds` plus one sweep.
///
/// Thread-safety: `live` and the sweeper's lifecycle are guarded by mutexes; deadlines are
/// atomics on each `ConnectionContext`.
final class HeaderDeadlines: Sendable {
    private let headerNanos: UInt64
    private let idleNanos: UInt64
    private let live = Mutex<[ObjectIdentifier: ConnectionContext]>([:])
    private let running = Atomic<Bool>(false)
    private let thread = Mutex<pthread_t?>(nil)
    /// Connections cut for missing their deadline (diagnostics, tests).
    let cut = Atomic<Int>(0)

    init(headerTimeoutSeconds: Int, idleTimeoutSeconds: Int) {
        headerNanos = UInt64(max(0, headerTimeoutSeconds)) * 1_000_000_000
        idleNanos = UInt64(max(0, idleTimeoutSeconds)) * 1_000_000_000
    }

    var enabled: Bool { headerNanos > 0 }

    // MARK: Called on the connection's I/O thread.

    func opened(_ c: ConnectionContext) {
        guard enabled else { return }
        c.deadline.store(monotonicNanos() + headerNanos, ordering: .relaxed)
        live.withLock { $0[ObjectIdentifier(c)] = c }
    }

    func closed(_ c: ConnectionContext) {
        guard enabled else { return }
        _ = live.withLock { $0.removeValue(forKey: ObjectIdentifier(c)) }
    }

    /// The request line of a kept-alive connection's next request arrived.
    func requestLine(_ c: ConnectionContext) {
        guard enabled, c.awaitingLine else { return }
        c.awaitingLine = false
        c.deadline.store(monotonicNanos() + headerNanos, ordering: .relaxed)
    }

    /// The head is complete (first access-handler call).
    func headComplete(_ c: ConnectionContext) {
        guard enabled else { return }
        c.deadline.store(0, ordering: .relaxed)
    }

    /// The request was answered; the connection may carry another one.
    func requestDone(_ c: ConnectionContext) {
        guard enabled else { return }
        c.awaitingLine = true
        c.deadline.store(monotonicNanos() + max(idleNanos, headerNanos), ordering: .relaxed)
    }

    // MARK: Sweeper

    func start() {
        guard enabled, !running.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let ctx = Unmanaged.passRetained(self).toOpaque()
        var tid = pthread_t()
        if pthread_create(&tid, nil, sweeperMain, ctx) == 0 {
            thread.withLock { $0 = tid }
        } else {
            Unmanaged<HeaderDeadlines>.fromOpaque(ctx).release()
            running.store(false, ordering: .releasing)
            Log.warn("http: cannot start the header-deadline sweeper; slow senders are bounded by the idle timeout only")
        }
    }

    func stop() {
        guard running.exchange(false, ordering: .acquiringAndReleasing) else { return }
        if let t = thread.withLock({ t -> pthread_t? in defer { t = nil }; return t }) { pthread_join(t, nil) }
    }

    fileprivate func sweepLoop() {
        // A quarter of the timeout (at most 250 ms): a slot is freed soon after its deadline.
        let step = UInt32(min(250_000, max(10_000, headerNanos / 4_000)))
        while running.load(ordering: .acquiring) {
            usleep(step)
            sweep()
        }
    }

    /// Shuts down every registered socket past its deadline. Runs under `live`'s lock, which
    /// `closed` also takes before libmicrohttpd closes the descriptor: a socket shut down here
    /// is always still the connection it was registered for.
    func sweep() {
        let now = monotonicNanos()
        live.withLock { m in
            for c in m.values {
                let d = c.deadline.load(ordering: .relaxed)
                if d != 0 && now > d && c.fd >= 0 {
                    c.deadline.store(0, ordering: .relaxed)
                    // Counted before the cut: a client that sees its socket end can read the
                    // count at once (a sweeper preempted between the two left it at 0).
                    cut.add(1, ordering: .relaxed)
                    Glibc.shutdown(c.fd, Int32(SHUT_RDWR))
                }
            }
        }
    }
}

private let sweeperMain: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { raw in
    let d = Unmanaged<HeaderDeadlines>.fromOpaque(raw!).takeRetainedValue()
    d.sweepLoop()
    return nil
}
