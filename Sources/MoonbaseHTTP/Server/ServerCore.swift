import CHTTPGuard
import CMicroHTTPD
import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The state shared by libmicrohttpd's callbacks: configuration, handler, worker pool and
/// counters. Passed to C as an unretained pointer; `HTTPServer` keeps it alive until the
/// daemon has stopped.
///
/// Thread-safety: all stored properties are immutable or atomic.
final class ServerCore: Sendable {
    let config: HTTPServerConfig
    let handler: any HTTPHandler
    let pool: WorkerPool
    /// Writes run together in one transaction (`HTTPHandler.batches`).
    let lane: BatchLane
    /// Requests presented to the handler and not yet completed by libmicrohttpd.
    let inFlight = Atomic<Int>(0)
    /// Connections suspended for a worker and not yet seen again after their resume.
    let suspendedCount = Atomic<Int>(0)
    /// Requests whose answer is queued and not yet completed (being sent).
    let sending = Atomic<Int>(0)
    /// Set when shutdown begins: responses then carry `Connection: close`.
    let closing = Atomic<Bool>(false)
    /// Takes over `Upgrade:` requests (WebSocket); nil → upgrades are ordinary requests.
    let upgrader: (any HTTPUpgradeHandler)?
    /// Connections libmicrohttpd holds, upgraded ones included.
    let openConnections = Atomic<Int>(0)
    /// Plain (not upgraded) connections per client address, kept when an upgrade handler is set.
    let plainByAddress = Mutex<[String: Int]>([:])
    /// Upgraded connections libmicrohttpd has not closed yet (their sockets already belong to
    /// the upgrade handler: it frees them within a loop turn of the 101).
    let upgradedOpen = Atomic<Int>(0)
    /// Streaming responses still open (ended at shutdown).
    let streams = StreamRegistry()
    /// The header-completion deadline of every open connection.
    let deadlines: HeaderDeadlines

    init(config: HTTPServerConfig, handler: any HTTPHandler, upgrader: (any HTTPUpgradeHandler)? = nil) throws(HTTPServerError) {
        self.config = config
        self.handler = handler
        deadlines = HeaderDeadlines(headerTimeoutSeconds: config.headerTimeoutSeconds,
                                    idleTimeoutSeconds: config.idleTimeoutSeconds)
        self.upgrader = upgrader
        pool = try WorkerPool(workers: config.workers, maxQueued: config.maxQueuedJobs,
                              spinMicros: config.workerSpinMicros, jobLimitMillis: config.jobLimitMillis,
                              graceMillis: config.stuckGraceMillis, maxWorkers: config.maxWorkers,
                              cpuSlots: config.cpuBoundSlots, cpuHoldMicros: config.cpuBoundHoldMicros)
        lane = BatchLane(pool: pool, handler: handler)
    }

    // MARK: First access-handler call: headers are in.

    /// Builds the request from the headers; answers at once only when the request must not be
    /// read further (431, 413 by `Content-Length`), which closes the connection.
    func begin(_ conn: OpaquePointer, method: String, conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        let ctx = connectionContext(conn)
        let target = ctx?.rawTarget ?? "/"
        if let ctx { deadlines.headComplete(ctx) }
        var collector = HeaderCollector()
        withUnsafeMutablePointer(to: &collector) { p in
            _ = MHD_get_connection_values_n(conn, .HEADER_KIND, collectHeader, p)
        }
        let requestId = collector.requestId.flatMap { RequestID.isSane($0) ? $0 : nil } ?? RequestID.generate()
        var remote = ctx?.remoteAddress ?? ""
        if let ctx, ctx.remoteAddress == nil {
            remote = clientAddress(conn)
            ctx.remoteAddress = remote
        }
        var request = HTTPRequest(method: method, path: "/", headers: collector.headers, remoteAddress: remote,
                                  requestId: requestId)
        let state = RequestState(core: self, connection: conn, request: request, bodyLimit: config.maxHeaderBytes)
        conCls.pointee = Unmanaged.passRetained(state).toOpaque()
        inFlight.add(1, ordering: .relaxed)

        let headerBytes = method.utf8.count + target.utf8.count + 11 + collector.bytes
        if headerBytes > config.maxHeaderBytes {
            return answer(state, .parseError(status: 431, code: .invalidJSON, message: "request headers too large"), close: true)
        }

        let (rawPath, rawQuery) = URIDecoding.split(stripAuthority(target))
        request.rawQuery = String(rawQuery)
        if let path = URIDecoding.decodePath(rawPath), path.utf8.first == UInt8(ascii: "/") || path == "*" {
            request.path = path
        } else {
            state.pending = .parseError(status: 400, code: .invalidJSON, message: "invalid path encoding")
        }
        if state.pending == nil {
            if let q = URIDecoding.parseQuery(rawQuery) {
                request.query = q
            } else {
                state.pending = .parseError(status: 400, code: .invalidJSON, message: "invalid query string encoding")
            }
        }
        state.bodyLimit = state.pending == nil
            ? handler.bodyLimit(method: method, path: request.path) : HTTPServerConfig.defaultJSONBodyLimit
        if let cl = collector.contentLength {
            guard let n = Int(cl), n >= 0 else {
                state.request = request
                return answer(state, .parseError(status: 400, code: .invalidJSON, message: "invalid Content-Length"), close: true)
            }
            if n > state.bodyLimit {
                state.request = request
                return answer(state, tooLarge(state.bodyLimit), close: true)
            }
            request.body.reserveCapacity(n)
        }
        state.request = request
        return .YES
    }

    // MARK: Later calls: body chunks, end of body, resumed after a worker.

    func proceed(_ state: RequestState, upload: UnsafePointer<CChar>?, size: UnsafeMutablePointer<Int>) -> MHD_Result {
        switch state.phase {
        case .body:
            let n = size.pointee
            if n > 0 {
                size.pointee = 0
                state.received += n
                if state.overLimit || state.received > state.bodyLimit {
                    state.overLimit = true
                    state.request.body = []
                    // Discard a little past the limit so the 413 can be read; then give up.
                    return state.received > state.bodyLimit + (1 << 20) ? .NO : .YES
                }
                if let upload {
                    upload.withMemoryRebound(to: UInt8.self, capacity: n) { p in
                        state.request.body.append(contentsOf: UnsafeBufferPointer(start: p, count: n))
                    }
                }
                return .YES
            }
            if state.overLimit { return answer(state, tooLarge(state.bodyLimit), close: true) }
            if let p = state.pending { return answer(state, p, close: false) }
            if let r = upgradeIfAsked(state) { return r }
            if handler.dispatch(&state.request) {
                return answer(state, handler.handle(state.request), close: false)
            }
            if handler.batches(state.request) {
                // A write that joins the others in one transaction. While no batch runs it is
                // tried here first (as any attempt): alone, it is answered without two hops.
                if lane.idle, handler.wantsAttempt(state.request), let r = handler.attempt(state.request, seat: nil) {
                    return answer(state, r, close: false)
                }
                suspend(state) { lane.add(state) }
                return .YES
            }
            // A call that finishes in microseconds costs less here than the two thread hops to
            // a worker and back: attempt it on this thread as an idle worker (its VM); if it
            // cannot finish within its short budget it continues on that worker.
            var reserved: (index: Int, seat: Int)?
            if handler.wantsAttempt(state.request) {
                if !handler.attemptNeedsSeat(state.request) {
                    // No worker's VM needed (a create; a read while long calls hold workers, so
                    // it need not queue behind them): whichever worker is free finishes it.
                    if !handler.attemptsOnlyBesideLongCalls(state.request) || pool.holdsLongJobs,
                       let r = handler.attempt(state.request, seat: nil) {
                        return answer(state, r, close: false)
                    }
                } else if let w = pool.reserveIdle() {
                    if let r = handler.attempt(state.request, seat: w.seat) {
                        pool.release(w.index)
                        return answer(state, r, close: false)
                    }
                    reserved = w
                }
            }
            state.cpuBound = config.cpuBoundSlots > 0 && reserved == nil && handler.cpuBound(state.request)
            suspend(state) {
                guard let w = reserved else { return pool.submit(state) }
                pool.submit(state, to: w.index)
                return true
            }
            return .YES
        case .suspended:
            leaveSuspended(state)
            let r = state.response ?? .parseError(status: 500, code: .internalError, message: "internal error")
            state.response = nil
            return answer(state, r, close: false)
        case .answered:
            return .YES
        }
    }

    /// Suspends the connection and hands the request on with `submit` (to a worker or the batch
    /// lane); refused there (queue full, stopping), it is answered 503 at once.
    private func suspend(_ state: RequestState, _ submit: () -> Bool) {
        state.phase = .suspended
        state.countedSuspended = true
        suspendedCount.add(1, ordering: .relaxed)
        MHD_suspend_connection(state.connection)
        if !submit() {
            state.response = .parseError(status: 503, code: .internalError, message: "server busy")
            MHD_resume_connection(state.connection)
        }
    }

    /// libmicrohttpd is done with the request (sent, failed or aborted).
    func completed(_ state: RequestState) {
        if state.phase == .answered { sending.subtract(1, ordering: .relaxed) }
        // An upgraded connection (101) is no longer HTTP: no header deadline for it.
        if state.answeredStatus != 101, let ctx = connectionContext(state.connection) { deadlines.requestDone(ctx) }
        leaveSuspended(state)
        if !state.upgraded { inFlight.subtract(1, ordering: .relaxed) }
        // libmicrohttpd reports an upgraded request complete only once its socket is given
        // back, so `upgraded` is settled here.
        if state.upgradeAccepted && !state.upgraded { upgrader?.upgradeAbandoned(state.request) }
    }

    private func leaveSuspended(_ state: RequestState) {
        if state.countedSuspended {
            state.countedSuspended = false
            suspendedCount.subtract(1, ordering: .releasing)
        }
    }

    private func tooLarge(_ limit: Int) -> HTTPResponse {
        .parseError(status: 413, code: .fileTooLarge, message: "request entity too large (limit \(limit) bytes)")
    }

    // MARK: Responses

    /// Turns `response` into an MHD response and queues it.
    func answer(_ state: RequestState, _ response: HTTPResponse, close: Bool) -> MHD_Result {
        if state.phase != .answered { sending.add(1, ordering: .relaxed) }
        state.phase = .answered
        state.answeredStatus = response.status
        let r: OpaquePointer?
        if let stream = response.stream {
            r = streamResponse(stream, state.connection)
        } else if let file = response.file, let fd = file.take() {
            r = MHD_create_response_from_fd_at_offset64(file.size, fd, file.offset)
        } else {
            r = response.body.withUnsafeBytes { b in
                MHD_create_response_from_buffer(b.count, UnsafeMutableRawPointer(mutating: b.baseAddress),
                                                .RESPMEM_MUST_COPY)
            }
        }
        guard let r else { return .NO }
        var hasType = false
        for (k, v) in response.headers {
            if asciiCaseEqual(k, "content-type") { hasType = true }
            Self.addHeader(r, k, v)
        }
        if !hasType && response.status != 204 && response.status != 304 {
            Self.addHeader(r, "Content-Type", HTTPResponse.jsonContentType)
        }
        Self.addHeader(r, "X-Request-Id", state.request.requestId)
        if close || closing.load(ordering: .relaxed) {
            Self.addHeader(r, "Connection", "close")
        }
        let rc = mb_queue_app_response(state.connection, UInt32(clamping: response.status), r)
        MHD_destroy_response(r)
        return rc
    }

    // MARK: Helpers

    /// Adds one response header. `withCString` hands over a small string (most header names,
    /// request ids) from a copy on the stack; passing a String where C wants `const char *` made
    /// a heap array for each (`utf8CString`): ~600 instructions a header, on every response.
    static func addHeader(_ r: OpaquePointer, _ name: String, _ value: String) {
        name.withCString { n in value.withCString { v in _ = MHD_add_response_header(r, n, v) } }
    }

    func connectionContext(_ conn: OpaquePointer) -> ConnectionContext? {
        guard let raw = mb_mhd_socket_context(conn) else { return nil }
        return Unmanaged<ConnectionContext>.fromOpaque(raw).takeUnretainedValue()
    }

    private func clientAddress(_ conn: OpaquePointer) -> String {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: 64) { buf in
            let n = mb_mhd_client_ip(conn, buf.baseAddress, 64)
            return n > 0 ? String(cString: buf.baseAddress!) : ""
        }
    }

    /// "http://host:port/p?q" (absolute-form) → "/p?q".
    private func stripAuthority(_ target: String) -> String {
        guard target.utf8.first != UInt8(ascii: "/"),
              let scheme = target.firstRange(of: "://") else { return target }
        let rest = target[scheme.upperBound...]
        if let slash = rest.firstIndex(of: "/") { return String(rest[slash...]) }
        if let q = rest.firstIndex(of: "?") { return "/" + rest[q...] }
        return "/"
    }
}

/// Accumulates headers for `MHD_get_connection_values_n` (names lower-cased) and their size.
struct HeaderCollector {
    var headers: [(String, String)] = []
    var bytes = 0
    var contentLength: String?
    var requestId: String?
}

private let collectHeader: MHD_KeyValueIteratorN = { cls, _, key, keySize, value, valueSize in
    guard let cls, let key else { return .YES }
    let c = cls.assumingMemoryBound(to: HeaderCollector.self)
    let name = key.withMemoryRebound(to: UInt8.self, capacity: keySize) { p in
        String(unsafeUninitializedCapacity: keySize) { out in
            for i in 0..<keySize {
                let b = p[i]
                out[i] = (b >= 65 && b <= 90) ? b + 32 : b
            }
            return keySize
        }
    }
    let val = value.map { v in
        v.withMemoryRebound(to: UInt8.self, capacity: valueSize) { p in
            String(decoding: UnsafeBufferPointer(start: p, count: valueSize), as: UTF8.self)
        }
    } ?? ""
    c.pointee.bytes += keySize + valueSize + 4
    if name == "content-length" { c.pointee.contentLength = val }
    if name == "x-request-id" { c.pointee.requestId = val }
    c.pointee.headers.append((name, val))
    return .YES
}
