import MoonbaseCore
#if canImport(Glibc)
import Glibc
#endif

/// The application side of the server (the API layer implements it).
///
/// Threads: `bodyLimit` and `runsInline` run on an I/O thread and must be cheap and
/// non-blocking. `handle` runs on a worker thread (our own pthreads, one `ThreadLocal` world
/// each) unless `runsInline` said true, in which case it runs on the I/O thread.
public protocol HTTPHandler: Sendable {
    /// The body limit for this request, asked once its headers arrived (1 MiB for JSON,
    /// 20 MiB for file uploads by default). A larger body → 413 with Parse code 130.
    func bodyLimit(method: String, path: String) -> Int
    /// true → answer on the I/O thread (health, metrics); false → run `handle` on a worker.
    func runsInline(_ request: HTTPRequest) -> Bool
    /// What the server calls once the body is read, on the I/O thread: `runsInline`, with the
    /// chance to leave a note in `request.note` (e.g. the matched route) for `handle`, so the
    /// work is not repeated on the worker. Defaults to `runsInline`.
    func dispatch(_ request: inout HTTPRequest) -> Bool
    /// Computes the answer. Never throws: errors become `HTTPResponse.error(_:)`.
    func handle(_ request: HTTPRequest) -> HTTPResponse
    /// After `dispatch` said "worker": may this request first be attempted on the I/O thread
    /// (`attempt`)? Cheap and non-blocking.
    func wantsAttempt(_ request: HTTPRequest) -> Bool
    /// Does the attempt run as an idle worker (its Lua VM), or on the I/O thread alone? Asked
    /// after `wantsAttempt` said true. Defaults to true.
    func attemptNeedsSeat(_ request: HTTPRequest) -> Bool
    /// For an attempt without a seat: is it made only while the pool holds long calls (spinning
    /// or waiting scripts, behind which a queued request could wait), not otherwise? Defaults
    /// to false: attempted either way.
    func attemptsOnlyBesideLongCalls(_ request: HTTPRequest) -> Bool
    /// Runs on the I/O thread as the idle worker `seat`, which the pool holds parked meanwhile
    /// (nil when `attemptNeedsSeat` said false): the answer, or nil when the work must continue
    /// on a worker — the server then hands the request to that very worker, whose `handle`
    /// picks up where the attempt stopped (without a seat: to the pool's queue, and `handle`
    /// starts over). Must leave the I/O thread within about a millisecond.
    func attempt(_ request: HTTPRequest, seat: Int?) -> HTTPResponse?
    /// Does the worker's `handle` run on the CPU from start to end (a local read: no sleep, no
    /// wait for a lock), so that running more at once than `HTTPServerConfig.cpuBoundSlots`
    /// only slices the cores? Asked on the I/O thread before the request is queued; cheap.
    /// Defaults to false.
    func cpuBound(_ request: HTTPRequest) -> Bool
    /// After `dispatch` said "worker": does this request join a batch (a short write that may
    /// share one transaction with others, see `handleBatch`)? Cheap and non-blocking. While no
    /// batch runs, such a request is still attempted first when `wantsAttempt` says so.
    /// Defaults to false.
    func batches(_ request: HTTPRequest) -> Bool
    /// Answers the requests of one batch, in order, on a worker: one answer per request, each
    /// given only once everything it wrote is committed. Defaults to `handle` for each.
    func handleBatch(_ requests: [HTTPRequest]) -> [HTTPResponse]
}

extension HTTPHandler {
    public func bodyLimit(method: String, path: String) -> Int { HTTPServerConfig.defaultJSONBodyLimit }
    public func runsInline(_ request: HTTPRequest) -> Bool { false }
    public func dispatch(_ request: inout HTTPRequest) -> Bool { runsInline(request) }
    public func wantsAttempt(_ request: HTTPRequest) -> Bool { false }
    public func attemptNeedsSeat(_ request: HTTPRequest) -> Bool { true }
    public func attemptsOnlyBesideLongCalls(_ request: HTTPRequest) -> Bool { false }
    public func attempt(_ request: HTTPRequest, seat: Int?) -> HTTPResponse? { nil }
    public func cpuBound(_ request: HTTPRequest) -> Bool { false }
    public func batches(_ request: HTTPRequest) -> Bool { false }
    public func handleBatch(_ requests: [HTTPRequest]) -> [HTTPResponse] { requests.map { handle($0) } }
}

/// Server settings (defaults: headers 16 KiB, 1,024 connections, 30 s idle).
public struct HTTPServerConfig: Sendable {
    /// Numeric IPv4 or IPv6 address to bind ("" = all IPv4 interfaces).
    public var host: String
    /// 0 = any free port (read the real one from `HTTPServer.port` after `start()`).
    public var port: Int
    /// libmicrohttpd polling threads (each with its own epoll set).
    public var ioThreads: Int
    /// Worker pthreads that run `HTTPHandler.handle`.
    public var workers: Int
    /// Live workers at most: while every worker has been on one job for a few milliseconds and
    /// jobs wait, the pool starts extra workers up to this many (each exits after 2 s idle), so
    /// slow or spinning scripts hold their own workers. 0 (or ≤ `workers`) = a fixed pool.
    public var maxWorkers = 0
    /// Requests the handler calls CPU-bound (`HTTPHandler.cpuBound`) running at once at most,
    /// one per core is the point; 0 = no limit. The rest wait in the queue, which other requests
    /// pass (see `WorkerPool`).
    public var cpuBoundSlots = 0
    /// A CPU-bound request stops counting toward `cpuBoundSlots` once it has run this long (a
    /// slow scan does not hold a slot beyond it).
    public var cpuBoundHoldMicros = 5_000
    /// Request line + headers above this → 431 with a Parse body (code 107).
    public var maxHeaderBytes: Int
    /// Concurrent connections; libmicrohttpd closes new ones above it.
    public var maxConnections: Int
    /// A connection idle (or dribbling nothing) this long is closed.
    public var idleTimeoutSeconds: Int
    /// A request's head (request line and headers) must be complete this long after the
    /// connection opened, or after its request line on a kept-alive connection, however slowly
    /// the bytes arrive; 0 = no deadline (only the idle timeout, which every byte restarts).
    public var headerTimeoutSeconds: Int
    /// Connections from one client address; the rest of `maxConnections` stays free for
    /// others. 0 = three quarters of `maxConnections`. Behind a reverse proxy every client
    /// shares the proxy's address: raise it to `maxConnections` there.
    public var maxConnectionsPerIP: Int
    /// A worker job's default time limit (the Lua call timeout; calls with a longer one raise
    /// it through `JobWatch.noteLimit`). 0 = no stuck-worker backstop.
    public var jobLimitMillis: Int
    /// How long past its limit a worker may run before it is considered stuck and replaced.
    public var stuckGraceMillis: Int
    /// Queued worker jobs above this → 503 (code 1) instead of an unbounded queue.
    public var maxQueuedJobs: Int
    /// listen(2) backlog.
    public var listenBacklog: Int
    /// How long an idle worker spins before sleeping in the kernel (0 = sleep at once). On the
    /// shared 2-core box spinning cost more CPU per request than the wake-ups it saved
    /// (W1: 20 µs → +15%, 50 µs → +30%), hence the default 0; it may pay with idle cores.
    public var workerSpinMicros: Int
    /// Upgraded (WebSocket) connections held on top of `maxConnections`; the upgrade handler
    /// enforces its own caps below this.
    public var maxUpgradedConnections = 10_000

    public static let defaultJSONBodyLimit = 1 << 20
    public static let defaultFileBodyLimit = 20 << 20

    public init(host: String = "127.0.0.1", port: Int = 8080, ioThreads: Int = HTTPServerConfig.cores,
                workers: Int = 2 * HTTPServerConfig.cores, maxHeaderBytes: Int = 16 << 10,
                maxConnections: Int = 1024, idleTimeoutSeconds: Int = 30, maxQueuedJobs: Int = 4096,
                listenBacklog: Int = 511, workerSpinMicros: Int = 0, headerTimeoutSeconds: Int = 10,
                maxConnectionsPerIP: Int = 0, jobLimitMillis: Int = 10_000, stuckGraceMillis: Int = 5_000) {
        self.host = host
        self.port = port
        self.ioThreads = ioThreads
        self.workers = workers
        self.maxHeaderBytes = maxHeaderBytes
        self.maxConnections = maxConnections
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.maxQueuedJobs = maxQueuedJobs
        self.listenBacklog = listenBacklog
        self.workerSpinMicros = workerSpinMicros
        self.headerTimeoutSeconds = headerTimeoutSeconds
        self.maxConnectionsPerIP = maxConnectionsPerIP
        self.jobLimitMillis = jobLimitMillis
        self.stuckGraceMillis = stuckGraceMillis
    }

    /// The per-address cap given to libmicrohttpd (see `maxConnectionsPerIP`).
    var effectivePerIPLimit: Int {
        let total = max(1, maxConnections)
        return maxConnectionsPerIP > 0 ? min(maxConnectionsPerIP, total) : max(1, total * 3 / 4)
    }

    /// Online CPUs (at least 1).
    public static var cores: Int { Processors.online }

    /// libmicrohttpd's per-connection memory pool: it must hold the largest header block we
    /// accept with room to spare, or libmicrohttpd answers 431 itself (HTML body) before our
    /// handler can answer with a Parse body. libmicrohttpd 0.9.75 zeroes the whole pool
    /// between keep-alive requests and touches every page of it, so it is kept small:
    /// limit + 16 KiB (32 KiB by default) lets header blocks up to about 1.5× the limit reach
    /// our handler and costs about 1 µs per request.
    var connectionMemoryLimit: Int { max(32 << 10, maxHeaderBytes + (16 << 10)) }
}

