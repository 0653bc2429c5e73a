import MoonbaseAPI
import MoonbaseCore
import MoonbaseCrypto
import MoonbaseHTTP
import MoonbaseJSON
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Parse LiveQuery over WebSocket on `GET /parse` (the URL Parse SDKs derive from the server
/// URL): the handshake, the realtime connection caps, and the message protocol. Sockets live on
/// `WebSocketLoop` threads; every message that needs a session, a quota check, Lua or the
/// engine is handled on the HTTP worker pool, one message at a time per connection.
///
/// Thread-safety: counters behind mutexes/atomics; everything else immutable after `attach`.
public final class LiveQueryServer: HTTPUpgradeHandler, WebSocketDelegate, @unchecked Sendable {
    public let config: LiveQueryConfig
    let services: Services
    let engine: (any LiveQueryEngine)?
    private var loops: [WebSocketLoop] = []
    private let runner = Mutex<HTTPServer?>(nil)
    private let nextId = Atomic<UInt64>(1)
    private struct Counts {
        var total = 0
        var byIP: [String: Int] = [:]
        var byUser: [String: Int] = [:]
    }
    private let counts = Mutex(Counts())
    /// Worker jobs submitted and not finished (shutdown waits for the disconnect triggers).
    let pendingJobs = Atomic<Int>(0)
    let stopped = Atomic<Bool>(false)
    /// Event bytes queued to WebSocket clients (for `/metrics`).
    let bytesOut = Atomic<Int>(0)

    public init(config: LiveQueryConfig, services: Services, engine: (any LiveQueryEngine)?) throws(ParseError) {
        self.config = config
        self.services = services
        self.engine = engine
        for _ in 0..<max(1, config.loops) {
            loops.append(try WebSocketLoop(pingInterval: .milliseconds(config.pingIntervalMillis),
                                           maxMessage: config.maxMessageBytes, delegate: self))
        }
        // `/metrics`: the realtime families, under `transport="websocket"`.
        services.realtime.addTransport("websocket", connections: { [unowned self] in self.connectionCount },
                                       bytesOut: { [unowned self] in self.bytesOut.load(ordering: .relaxed) })
    }

    /// The server whose workers run messages and triggers (set once, before `start()`).
    public func attach(_ server: HTTPServer) { runner.withLock { $0 = server } }

    /// Open WebSocket connections.
    public var connectionCount: Int { counts.withLock { $0.total } }

    // MARK: handshake (libmicrohttpd I/O thread)

    public func upgradeDecision(_ request: HTTPRequest) -> HTTPUpgradeDecision? {
        guard let up = request.header("upgrade"), up.lowercased().contains("websocket") else { return nil }
        guard request.path == "/parse" || request.path == "/parse/" else {
            return .refuse(.parseError(status: 404, code: .objectNotFound, message: "WebSocket connections are served on /parse"))
        }
        guard request.method == "GET" else {
            return .refuse(.parseError(status: 400, code: .invalidJSON, message: "a WebSocket upgrade must be a GET"))
        }
        guard let conn = request.header("connection"), conn.lowercased().contains("upgrade") else {
            return .refuse(.parseError(status: 400, code: .invalidJSON, message: "missing 'Connection: Upgrade'"))
        }
        guard request.header("sec-websocket-version")?.trimmingWhitespace() == "13" else {
            return .refuse(.parseError(status: 426, code: .invalidJSON, message: "unsupported WebSocket version (13 only)",
                                       headers: [("Sec-WebSocket-Version", "13")]))
        }
        guard let key = request.header("sec-websocket-key")?.trimmingWhitespace(),
              Base64.decode(key)?.count == 16 else {
            return .refuse(.parseError(status: 400, code: .invalidJSON, message: "invalid Sec-WebSocket-Key"))
        }
        if stopped.load(ordering: .relaxed) {
            return .refuse(.parseError(status: 503, code: .internalError, message: "server is shutting down"))
        }
        let ip = request.remoteAddress
        // The connection is counted from this decision on, not from `upgraded`: the 101 reaches
        // the client before libmicrohttpd hands the socket over, and a client opening its next
        // socket at once must already be counted against the caps (`upgradeAbandoned` gives
        // the slot back if the upgrade never happens).
        let refusal = counts.withLock { c -> HTTPResponse? in
            if c.total >= config.maxConnections {
                return .parseError(status: 503, code: .internalError,
                                   message: "too many realtime connections (limit \(config.maxConnections))")
            }
            if c.byIP[ip, default: 0] >= config.maxConnectionsPerIP {
                return .parseError(status: 429, code: .requestLimitExceeded,
                                   message: "too many realtime connections from this address (limit \(config.maxConnectionsPerIP))")
            }
            c.total += 1
            c.byIP[ip, default: 0] += 1
            return nil
        }
        if let refusal { return .refuse(refusal) }
        return .accept(protocolName: "websocket", headers: [("Sec-WebSocket-Accept", SHA1.webSocketAccept(key: key))])
    }

    public func upgraded(_ socket: UpgradedSocket, request: HTTPRequest) {
        let id = nextId.add(1, ordering: .relaxed).oldValue
        let ws = WebSocketConnection(id: id, socket: socket, sendLimit: config.sendQueueBytes)
        let client = LiveClient(server: self, connection: ws, clientId: Random.alphanumeric(16),
                                ip: request.remoteAddress)
        ws.attachment.withLock { $0 = client }
        loops[Int(id % UInt64(loops.count))].add(ws)
    }

    // MARK: WebSocketDelegate (loop thread)

    func client(_ c: WebSocketConnection) -> LiveClient? {
        c.attachment.withLock { $0 as? LiveClient }
    }

    public func received(_ connection: WebSocketConnection, _ message: [UInt8], binary: Bool) {
        client(connection)?.enqueue(message)
    }

    public func oversized(_ connection: WebSocketConnection) {
        // Straight into wslay: it queues its own 1009 close right after this callback.
        connection.queueNow(LiveClient.errorMessage(code: 1, "message too large (limit \(config.maxMessageBytes) bytes)",
                                                    reconnect: false))
    }

    public func upgradeAbandoned(_ request: HTTPRequest) { release(ip: request.remoteAddress) }

    public func closed(_ connection: WebSocketConnection) {
        guard let c = client(connection) else { return }
        connection.attachment.withLock { $0 = nil }
        release(ip: connection.remoteAddress)
        c.connectionClosed()
    }

    /// Gives back a connection's place under the total and per-address caps.
    private func release(ip: String) {
        counts.withLock { k in
            k.total -= 1
            if let n = k.byIP[ip] { k.byIP[ip] = n > 1 ? n - 1 : nil }
        }
    }

    // MARK: per-user caps (worker threads)

    func reserveUser(_ userId: String) -> Bool {
        counts.withLock { c in
            if c.byUser[userId, default: 0] >= config.maxConnectionsPerUser { return false }
            c.byUser[userId, default: 0] += 1
            return true
        }
    }

    func releaseUser(_ userId: String) {
        counts.withLock { c in
            if let n = c.byUser[userId] { c.byUser[userId] = n > 1 ? n - 1 : nil }
        }
    }

    // MARK: worker pool

    /// Runs `work` on a worker. False when the pool refused it (full or stopping).
    func onWorker(_ work: @escaping @Sendable () -> Void) -> Bool {
        guard let server = runner.withLock({ $0 }) else { return false }
        pendingJobs.add(1, ordering: .relaxed)
        let ok = server.submit({ [self] in
            work()
            pendingJobs.subtract(1, ordering: .relaxed)
        }, onCancel: { [self] in pendingJobs.subtract(1, ordering: .relaxed) })
        if !ok { pendingJobs.subtract(1, ordering: .relaxed) }
        return ok
    }

    /// Closes every WebSocket (clients hear 1001 "going away"), runs their `disconnect`
    /// triggers on the workers and waits for them (up to `graceMillis`). Call before the HTTP
    /// server stops: libmicrohttpd must get its upgraded sockets back first.
    public func shutdown(graceMillis: Int = 5_000) {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for l in loops { l.stop() }
        let deadline = monotonicNanos() + UInt64(max(0, graceMillis)) * 1_000_000
        while pendingJobs.load(ordering: .relaxed) > 0 && monotonicNanos() < deadline { usleep(2_000) }
    }
}
