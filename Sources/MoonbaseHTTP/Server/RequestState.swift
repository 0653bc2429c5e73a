import CHTTPGuard
import CMicroHTTPD
import MoonbaseCore
import Synchronization

/// Per-connection state, created in the connect notification and freed on close.
///
/// Thread-safety (`@unchecked Sendable`): `rawTarget`, `remoteAddress`, `awaitingLine`,
/// `countedAddress` and `switchedProtocols` are touched only by the connection's I/O thread
/// (libmicrohttpd processes one connection on one thread). The header-deadline sweeper reads
/// `fd` (immutable) and `deadline` (atomic).
final class ConnectionContext: @unchecked Sendable {
    /// The raw request target of the request being read ("/a%20b?x=1"), from the URI log
    /// callback; requests on one connection are processed one after another.
    var rawTarget = ""
    /// The client's address, formatted once per connection.
    var remoteAddress: String?
    /// The socket (the sweeper shuts it down when `deadline` passes).
    let fd: Int32
    /// Monotonic nanoseconds by which the current request's head must be complete; 0 while a
    /// request is being read past its head, handled, or answered (see `HeaderDeadlines`).
    let deadline = Atomic<UInt64>(0)
    /// True between a completed request and the next request line on a kept-alive connection.
    var awaitingLine = false

    /// The client address this connection is counted under as a plain HTTP connection, while
    /// it is one (nil when not counted: no upgrade handler, or the connection switched protocols).
    var countedAddress: String?

    /// The connection answered 101 and its socket went to the upgrade handler: counted in
    /// `ServerCore.upgradedOpen` until libmicrohttpd closes it.
    var switchedProtocols = false

    init(fd: Int32) { self.fd = fd }
}

/// Where a request is in its life on the server.
enum RequestPhase {
    /// Headers read; reading (or discarding) the body.
    case body
    /// Handed to a worker; the connection is suspended until the worker resumes it.
    case suspended
    /// A response was queued.
    case answered
}

/// One request from its first access-handler call to libmicrohttpd's completion notice.
///
/// Thread-safety (`@unchecked Sendable`): everything but `response` is touched only by the
/// connection's I/O thread. A worker reads `request` (written before the job was queued under
/// the pool's mutex) and writes `response`, then calls `MHD_resume_connection`; the I/O thread
/// reads `response` only in the access-handler call that follows the resume, and libmicrohttpd
/// orders the two through its own mutex (resume marks the connection under
/// `cleanup_connection_mutex`, which the I/O thread takes before resuming it).
final class RequestState: WorkItem, @unchecked Sendable {
    let core: ServerCore
    let connection: OpaquePointer
    var phase = RequestPhase.body
    var request: HTTPRequest
    var bodyLimit: Int
    var received = 0
    var overLimit = false
    /// An answer fixed while reading headers (bad path encoding), sent once the body is read.
    var pending: HTTPResponse?
    /// The worker's answer (see the type's thread-safety note).
    var response: HTTPResponse?
    /// True while counted in `ServerCore.suspendedCount`.
    var countedSuspended = false
    /// The status of the answer queued (0 before): a 101 (protocol upgrade) hands the socket
    /// over, so the header deadline no longer applies to it.
    var answeredStatus = 0
    /// The handler called it CPU-bound (`HTTPHandler.cpuBound`): it waits for a CPU slot.
    var cpuBound = false
    /// Switched protocols: no longer counted in `ServerCore.inFlight`.
    var upgraded = false
    /// The upgrade handler accepted the request (it may have reserved a slot for it; see
    /// `HTTPUpgradeHandler.upgradeAbandoned`).
    var upgradeAccepted = false

    init(core: ServerCore, connection: OpaquePointer, request: HTTPRequest, bodyLimit: Int) {
        self.core = core
        self.connection = connection
        self.request = request
        self.bodyLimit = bodyLimit
    }

    /// Set by whoever answers the job (its worker, `cancel` or `abandon`): exactly one of
    /// them writes `response` and resumes the connection.
    private let claimed = Atomic<Bool>(false)

    private func claim() -> Bool { !claimed.exchange(true, ordering: .acquiringAndReleasing) }

    /// Runs the handler on a worker, then resumes the connection (unless the job was
    /// abandoned meanwhile: then the connection may be gone and the result is dropped).
    func run(workerIndex: Int) {
        deliver(core.handler.handle(request))
    }

    /// Answers with `r` and resumes the connection, unless `cancel` or `abandon` answered first
    /// (then the connection may be gone and `r` is dropped).
    func deliver(_ r: HTTPResponse) {
        guard claim() else { return }
        response = r
        MHD_resume_connection(connection)
    }

    /// The pool stopped before a worker took this job: answer 503 and resume.
    func cancel() {
        guard claim() else { return }
        response = HTTPResponse.parseError(status: 503, code: .internalError, message: "server is shutting down")
        MHD_resume_connection(connection)
    }

    /// The job's worker did not return in time (or was still running when shutdown's grace
    /// ran out): answer now; the worker's late result, if any, is dropped.
    func abandon(shuttingDown: Bool) {
        guard claim() else { return }
        response = shuttingDown
            ? HTTPResponse.parseError(status: 503, code: .internalError, message: "server is shutting down")
            : HTTPResponse.parseError(status: 400, code: .timeout,
                                      message: "request timed out: its worker did not return within the time limit and was replaced")
        MHD_resume_connection(connection)
    }
}
