import CMicroHTTPD

/// Per-connection state, created in the connect notification and freed on close.
///
/// Only its connection's I/O thread touches it (libmicrohttpd processes one connection on
/// one thread), so it needs no lock.
final class ConnectionContext {
    /// The raw request target of the request being read ("/a%20b?x=1"), from the URI log
    /// callback; requests on one connection are processed one after another.
    var rawTarget = ""
    /// The client's address, formatted once per connection.
    var remoteAddress: String?
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
    /// Switched protocols: no longer counted in `ServerCore.inFlight`.
    var upgraded = false

    init(core: ServerCore, connection: OpaquePointer, request: HTTPRequest, bodyLimit: Int) {
        self.core = core
        self.connection = connection
        self.request = request
        self.bodyLimit = bodyLimit
    }

    /// Runs the handler on a worker, then resumes the connection.
    func run(workerIndex: Int) {
        response = core.handler.handle(request)
        MHD_resume_connection(connection)
    }

    /// The pool stopped before a worker took this job: answer 503 and resume.
    func cancel() {
        response = HTTPResponse.parseError(status: 503, code: 1, message: "server is shutting down")
        MHD_resume_connection(connection)
    }
}
