import CHTTPGuard
import CMicroHTTPD
import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The HTTP server: libmicrohttpd (epoll, a pool of `ioThreads` polling threads) in front of
/// a pool of `workers` pthreads.
///
/// One thread of our own accepts connections and hands each to libmicrohttpd, which places it
/// on an I/O thread by descriptor number (`CHTTPGuard`'s accept.c says why: libmicrohttpd's
/// threads accepting on a shared socket often left every connection of a burst on one thread).
///
/// Per request, an I/O thread reads headers and body, builds an `HTTPRequest` and either
/// answers inline (`HTTPHandler.runsInline`) or suspends the connection and queues the request
/// for a worker; the worker runs `handle`, stores the response and resumes the connection, and
/// the I/O thread queues the response in the access-handler call that follows (libmicrohttpd
/// wants responses queued from its own callbacks). Keep-alive and pipelining work because no
/// response is queued on the first (headers-only) call except for requests that must close
/// anyway (431, 413 by `Content-Length`).
///
/// Limits and their answers (Parse bodies `{"code":N,"error":"..."}`):
/// - headers (request line + fields) over `maxHeaderBytes` → 431, code 107;
/// - body over `HTTPHandler.bodyLimit` → 413, code 130 (by `Content-Length` before reading,
///   or while reading a chunked body; the connection is dropped 1 MiB past the limit);
/// - bad percent-encoding in path or query → 400, code 107;
/// - worker queue full or server stopping → 503, code 1;
/// - connection count, per-address cap and idle timeout: the socket is closed (by libmicrohttpd,
///   or, for plain connections over their caps beside an upgrade handler, shut down as it opens);
/// - a request head not complete within `headerTimeoutSeconds`: the socket is shut down
///   (`HeaderDeadlines`);
/// - what libmicrohttpd refuses itself (a malformed request line, an unsupported version, a
///   head beyond its memory pool, broken chunked framing): a Parse body too, rewritten in
///   `CHTTPGuard`; a Content-Length it cannot parse closes the connection unanswered.
///
/// Thread-safety: the daemon pointer and lifecycle are guarded by `state`; everything else is
/// immutable.
public final class HTTPServer: Sendable {
    let core: ServerCore
    private let state = Mutex<Lifecycle>(Lifecycle())
    private let boundPort = Atomic<Int>(0)

    private struct Lifecycle: ~Copyable {
        var daemon: DaemonHandle?
        var acceptor: AcceptorHandle?
        var stopped = false
    }

    /// Creates the worker pool; `start()` binds the socket.
    /// `upgrader` takes over `Upgrade:` requests (WebSocket); its connections do not count
    /// toward `maxConnections` but toward `maxUpgradedConnections`.
    public init(config: HTTPServerConfig, handler: any HTTPHandler,
                upgrader: (any HTTPUpgradeHandler)? = nil) throws(HTTPServerError) {
        core = try ServerCore(config: config, handler: handler, upgrader: upgrader)
    }

    /// The real bound port (after `start()`; 0 before).
    public var port: Int { boundPort.load(ordering: .acquiring) }

    /// The worker index (0..<workers) of the calling thread, nil off the worker pool.
    public static var currentWorkerIndex: Int? { WorkerPool.currentIndex() }

    /// Binds and starts serving. Throws if the address is invalid or the port is taken.
    public func start() throws(HTTPServerError) {
        let cfg = core.config
        guard (0...65535).contains(cfg.port) else { throw HTTPServerError("invalid port \(cfg.port)") }
        guard mb_guard_ready() != 0 else { throw HTTPServerError("libmicrohttpd's MHD_queue_response not found behind the error-body guard") }
        let flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue | MHD_USE_TURBO.rawValue
            | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ITC.rawValue
            | (core.upgrader != nil ? MHD_ALLOW_UPGRADE.rawValue : 0)
        let cls = Unmanaged.passUnretained(core).toOpaque()
        // A client that disconnects during sendfile(2) must not kill the process.
        signal(SIGPIPE, SIG_IGN)
        // libmicrohttpd's threads inherit this thread's signal mask: unblock SIGURG (the Lua
        // watchdog's signal) while they are created, so inline handlers can be interrupted
        // too even when `start()` runs on a libdispatch thread, which blocks signals.
        var oldMask = sigset_t()
        var urg = sigset_t()
        sigemptyset(&urg)
        sigaddset(&urg, SIGURG)
        pthread_sigmask(SIG_UNBLOCK, &urg, &oldMask)
        defer { pthread_sigmask(SIG_SETMASK, &oldMask, nil) }
        guard let acceptor = mb_acceptor_open(cfg.host.isEmpty ? nil : cfg.host, UInt16(cfg.port),
                                              Int32(clamping: max(1, cfg.listenBacklog))) else {
            throw HTTPServerError("cannot listen on \(cfg.host.isEmpty ? "*" : cfg.host):\(cfg.port)")
        }
        let daemon: OpaquePointer? = {
            var o = mb_mhd_options()
            o.flags = UInt32(flags)
            o.thread_pool = UInt32(max(1, cfg.ioThreads))
            // With an upgrade handler the caps on plain connections are kept when they open
            // (`plainOpened`); upgraded sockets leave libmicrohttpd right after their 101, and
            // the room on top covers connections between the upgrade decision and that hand-off.
            o.connection_limit = UInt32(max(1, cfg.maxConnections)
                + (core.upgrader != nil ? max(0, cfg.maxUpgradedConnections) : 0))
            o.per_ip_limit = core.upgrader != nil ? 0 : UInt32(cfg.effectivePerIPLimit)
            o.timeout_seconds = UInt32(max(0, cfg.idleTimeoutSeconds))
            o.memory_limit = cfg.connectionMemoryLimit
            o.memory_increment = 4096
            o.access_cb = mhdAccess
            o.access_cls = cls
            o.completed_cb = mhdCompleted
            o.completed_cls = cls
            o.uri_log_cb = mhdURILog
            o.uri_log_cls = cls
            o.connection_cb = mhdConnectionNotify
            o.connection_cls = cls
            return mb_mhd_start(&o)
        }()
        guard let daemon else {
            mb_acceptor_close(acceptor)
            throw HTTPServerError("cannot start the HTTP threads for \(cfg.host.isEmpty ? "*" : cfg.host):\(cfg.port)")
        }
        let ok = state.withLock { s -> Bool in
            if s.daemon != nil || s.stopped { return false }
            s.daemon = DaemonHandle(raw: daemon)
            s.acceptor = AcceptorHandle(raw: acceptor)
            return true
        }
        guard ok else {
            MHD_stop_daemon(daemon)
            mb_acceptor_close(acceptor)
            throw HTTPServerError("server already started or stopped")
        }
        boundPort.store(Int(mb_acceptor_port(acceptor)), ordering: .releasing)
        let rc = mb_acceptor_start(acceptor, daemon)
        guard rc == 0 else {
            _ = shutdown(graceMillis: 0)
            throw HTTPServerError("cannot start the accepting thread (errno \(rc))")
        }
        core.deadlines.start()
        let pool = core.pool
        HealthBoard.shared.register(healthKey) {
            let st = pool.status()
            guard st.saturated else { return nil }
            return HealthProblem(status: "saturated", fields: [
                ("workers", String(st.workers)), ("busy", String(st.busy)),
                ("stuck", String(st.stuck)), ("queued", String(st.queued)),
            ])
        }
    }

    /// This server's entry on the process's health board.
    private var healthKey: String { "http.workers" }

    /// Worker pool counts (health, metrics, tests).
    public var workerStatus: (workers: Int, busy: Int, stuck: Int, queued: Int, saturated: Bool, replaced: Int) {
        let st = core.pool.status()
        return (st.workers, st.busy, st.stuck, st.queued, st.saturated, core.pool.replaced.load(ordering: .relaxed))
    }

    /// Graceful stop: stop accepting, let in-flight requests finish for up to `graceMillis`
    /// (responses meanwhile carry `Connection: close`), answer still-queued jobs with 503,
    /// let running jobs finish within the grace or their own time limit (whichever ends later),
    /// answer those still running then with 503 (their worker threads are abandoned, not
    /// waited for), let the queued answers reach their clients (up to 2 s more),
    /// then stop. Returns the number of worker threads left running (stuck or abandoned): the
    /// caller should exit the process rather than wait for them.
    /// Idempotent; blocks the caller until the daemon is gone.
    @discardableResult
    public func shutdown(graceMillis: Int = 10_000) -> Int {
        let (handle, acceptor) = state.withLock { s -> (DaemonHandle?, AcceptorHandle?) in
            if s.stopped { return (nil, nil) }
            s.stopped = true
            return (s.daemon, s.acceptor)
        }
        HealthBoard.shared.unregister(healthKey)
        guard let handle else {
            core.deadlines.stop()
            return core.pool.stop(deadlineNanos: monotonicNanos() + UInt64(max(0, graceMillis)) * 1_000_000)
        }
        core.closing.store(true, ordering: .relaxed)
        // No new connections from here on (they wait in the backlog until the socket closes).
        if let acceptor { mb_acceptor_stop(acceptor.raw) }
        core.streams.finishAll()
        let deadline = monotonicNanos() + UInt64(max(0, graceMillis)) * 1_000_000
        while core.inFlight.load(ordering: .relaxed) > 0 && monotonicNanos() < deadline {
            usleep(2_000)
        }
        // Jobs still running past the deadline and their own limit are answered 503 and their
        // threads abandoned.
        let left = core.pool.stop(deadlineNanos: deadline)
        // Every suspended connection must be resumed and seen again before MHD_stop_daemon.
        var waited = 0
        while core.suspendedCount.load(ordering: .acquiring) > 0 {
            usleep(1_000)
            waited += 1
            if waited % 5_000 == 0 {
                Log.warn("http shutdown: waiting for \(core.suspendedCount.load(ordering: .relaxed)) resumed connections")
            }
        }
        // A resumed connection has its response queued, not yet sent: MHD_stop_daemon closes
        // every connection at once, so stopping now would cut those answers off (the client
        // sees a closed socket instead of its 200 or 503). Let libmicrohttpd finish sending
        // them; the wait is bounded because a client that never reads must not hold the stop.
        // Requests still reading their head or body are not waited for: the grace is over.
        let flushDeadline = monotonicNanos() + HTTPServer.flushNanos
        while core.sending.load(ordering: .relaxed) > 0 && monotonicNanos() < flushDeadline {
            usleep(1_000)
        }
        core.deadlines.stop()
        MHD_stop_daemon(handle.raw)
        if let acceptor { mb_acceptor_close(acceptor.raw) }
        return left
    }

    /// Shutdown with a grace period given as a `Duration`.
    public func shutdown(grace: Duration) {
        let (s, atto) = grace.components
        _ = shutdown(graceMillis: Int(s) * 1000 + Int(atto / 1_000_000_000_000_000))
    }

    /// How long shutdown lets libmicrohttpd send responses already queued (after the grace,
    /// the queued-job 503s and the running handlers) before it closes every connection.
    static let flushNanos: UInt64 = 2_000_000_000

    /// Error answers libmicrohttpd made itself, sent with a Parse body instead of its HTML.
    public static var libraryErrorsRewritten: Int { Int(mb_guard_rewritten()) }
    /// Connections closed unanswered for a Content-Length libmicrohttpd cannot parse.
    public static var badContentLengthsClosed: Int { Int(mb_guard_closed_bad_length()) }

    /// Connections shut down for missing the header deadline (diagnostics, tests).
    public var headerDeadlineCuts: Int { core.deadlines.cut.load(ordering: .relaxed) }
    /// CPU slots (`HTTPServerConfig.cpuBoundSlots`), and the CPU-bound requests that were queued
    /// while all of them were taken.
    public var cpuSlots: (slots: Int, waited: Int) { (core.pool.cpuSlots, core.pool.waitedForSlot.load(ordering: .relaxed)) }

    /// Write batches run (`HTTPHandler.batches`) and the requests they held.
    public var writeBatches: (batches: Int, requests: Int) { core.lane.counts }
    /// Requests waiting for the next write batch (diagnostics, tests).
    public var writeBatchWaiting: Int { core.lane.waitingCount }

    /// Whether the worker pool has stopped taking jobs (shutdown past its grace; tests).
    public var workersStopping: Bool { core.pool.isStopping }

    /// Requests read and not yet completed (diagnostics, tests).
    public var inFlightRequests: Int { core.inFlight.load(ordering: .relaxed) }

    deinit {
        _ = shutdown(graceMillis: 0)
    }
}

/// The daemon pointer. `@unchecked Sendable`: libmicrohttpd's daemon API is thread-safe for
/// the calls we make on it from other threads (quiesce, stop), and the lifecycle mutex
/// serialises those.
struct DaemonHandle: @unchecked Sendable {
    let raw: OpaquePointer
}

/// The accepting thread and its listening socket (`mb_acceptor`). `@unchecked Sendable`: stop and
/// close are called once, by `shutdown`, which the lifecycle mutex makes the only caller.
struct AcceptorHandle: @unchecked Sendable {
    let raw: OpaquePointer
}
