import CHTTPGuard
import CMicroHTTPD
import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Takes over connections that ask for a protocol switch (`Upgrade: websocket`).
///
/// Threads: both calls run on a libmicrohttpd I/O thread and must not block: hand the socket to
/// your own loop and return.
public protocol HTTPUpgradeHandler: Sendable {
    /// A fully read request carrying an `Upgrade` header. nil → not ours: the request goes
    /// through the ordinary handler. `.refuse(r)` answers `r` (e.g. 400 for a bad handshake,
    /// 503 over a cap); `.accept(headers)` answers 101 with these headers (plus
    /// `Upgrade`/`Connection`, which the server adds) and calls `upgraded` once it is sent.
    func upgradeDecision(_ request: HTTPRequest) -> HTTPUpgradeDecision?
    /// The 101 went out: the socket now belongs to the handler until it calls `close()`.
    func upgraded(_ socket: UpgradedSocket, request: HTTPRequest)
    /// An accepted request ended without becoming an upgraded socket (the client went away
    /// before the 101 was sent, or it could not be queued): undo what `upgradeDecision`
    /// reserved for it. Called at most once per accepted request, never after `upgraded`.
    func upgradeAbandoned(_ request: HTTPRequest)
}

public enum HTTPUpgradeDecision: Sendable {
    case refuse(HTTPResponse)
    case accept(protocolName: String, headers: [(String, String)])
}

/// A connection switched to another protocol. The handler owns the descriptor: read and write
/// it (it is non-blocking) and give it up with `close()`, once.
///
/// libmicrohttpd is already done with the connection when the handler receives it: the server
/// keeps a duplicate of the socket and hands libmicrohttpd's upgrade handle back at once, so
/// libmicrohttpd frees the connection and its per-connection memory pool (sized for HTTP
/// headers) instead of holding them for as long as the socket lives.
///
/// Thread-safety: `fd` and `extra` are immutable; `close()` is idempotent and may be called from
/// any thread (stop polling `fd` first).
public final class UpgradedSocket: @unchecked Sendable {
    /// The client socket (non-blocking), owned by this object.
    public let fd: Int32
    /// Bytes libmicrohttpd read past the request (the first frames of a quick client).
    public let extra: [UInt8]
    /// The client's numeric address.
    public let remoteAddress: String
    private let closed = Atomic<Bool>(false)

    init(fd: Int32, extra: [UInt8], remoteAddress: String) {
        self.fd = fd
        self.extra = extra
        self.remoteAddress = remoteAddress
    }

    /// Closes the socket. Stop polling `fd` first.
    public func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        _ = Glibc.close(fd)
    }

    public var isClosed: Bool { closed.load(ordering: .acquiring) }

    /// A socket its handler dropped without closing is closed here, so it cannot leak.
    deinit { close() }
}

extension ServerCore {
    /// At the end of a request's body: when it asks for an upgrade the upgrade handler accepts,
    /// queues the 101 (or the handler's refusal) and returns libmicrohttpd's answer; nil → not
    /// an upgrade, carry on as usual.
    func upgradeIfAsked(_ state: RequestState) -> MHD_Result? {
        guard let upgrader, state.request.header("upgrade") != nil,
              let decision = upgrader.upgradeDecision(state.request) else { return nil }
        switch decision {
        case .refuse(let response):
            return answer(state, response, close: true)
        case .accept(let name, let headers):
            state.phase = .answered
            state.upgradeAccepted = true
            let cls = Unmanaged.passUnretained(self).toOpaque()
            guard let r = MHD_create_response_for_upgrade(mhdUpgraded, cls) else { return .NO }
            defer { MHD_destroy_response(r) }
            // libmicrohttpd adds `Connection: Upgrade` itself.
            ServerCore.addHeader(r, "Upgrade", name)
            for (k, v) in headers { ServerCore.addHeader(r, k, v) }
            return MHD_queue_response(state.connection, 101, r)
        }
    }

    /// The 101 was sent: take the socket from libmicrohttpd (a duplicate descriptor; the upgrade
    /// handle goes back at once, which frees the connection's memory pool) and hand it to the
    /// upgrade handler. The request no longer counts as in flight (a held WebSocket must not
    /// delay an HTTP shutdown's drain). If the descriptor cannot be duplicated (descriptor
    /// limit) the upgrade is abandoned: the socket closes and the handler hears
    /// `upgradeAbandoned` when the request completes.
    func didUpgrade(_ state: RequestState, fd: Int32, extra: [UInt8], urh: OpaquePointer) {
        // Everything that touches the connection happens before the handle is closed: after
        // that, libmicrohttpd may free the connection.
        let ctx = connectionContext(state.connection)
        let own = mb_dup_cloexec(fd)
        if own >= 0 {
            state.upgraded = true
            if let ctx {
                plainClosed(ctx)
                // The header-deadline sweeper shuts sockets down: never this one, which lives
                // on through the duplicate.
                deadlines.closed(ctx)
                ctx.switchedProtocols = true
            }
            inFlight.subtract(1, ordering: .relaxed)
            // Counted until libmicrohttpd's connection closes (connection notify): the accept
            // policy subtracts it from libmicrohttpd's count of open connections.
            upgradedOpen.add(1, ordering: .relaxed)
        } else {
            Log.warn("http: cannot take over an upgraded socket (errno \(errno)); closing it")
        }
        _ = mb_mhd_upgrade_close(urh)
        guard own >= 0 else { return }
        let socket = UpgradedSocket(fd: own, extra: extra, remoteAddress: state.request.remoteAddress)
        guard let upgrader else {
            socket.close()
            return
        }
        upgrader.upgraded(socket, request: state.request)
    }

    /// A plain connection opened: counted under its client address. False when it is over the
    /// caps, and the caller shuts it down: plain HTTP connections stay under `maxConnections`
    /// (upgraded ones have their own cap, kept by the upgrade handler, on top) and under the
    /// per-address cap. libmicrohttpd's own per-address cap would count upgraded sockets too (a
    /// client holding its WebSockets could not make a plain request), so with an upgrade handler
    /// the caps are kept here, when the I/O thread opens the connection, under the lock that
    /// counts: an accept policy would run on the accepting thread before the connections just
    /// handed over are counted, and let a burst from one address through together.
    func plainOpened(_ ctx: ConnectionContext, _ conn: OpaquePointer) -> Bool {
        let plain = openConnections.load(ordering: .relaxed) - upgradedOpen.load(ordering: .relaxed)
        if plain > config.maxConnections { return false }
        var buf = [CChar](repeating: 0, count: 64)
        let n = buf.withUnsafeMutableBufferPointer { mb_mhd_client_ip(conn, $0.baseAddress, 64) }
        guard n > 0 else { return true }
        let address = String(cString: buf)
        let cap = config.effectivePerIPLimit
        let admitted = plainByAddress.withLock { m -> Bool in
            let open = m[address] ?? 0
            if cap > 0 && open >= cap { return false }
            m[address] = open + 1
            return true
        }
        if admitted { ctx.countedAddress = address }
        return admitted
    }

    /// A connection closed or switched protocols: no longer a plain one of its address.
    func plainClosed(_ ctx: ConnectionContext) {
        guard let address = ctx.countedAddress else { return }
        ctx.countedAddress = nil
        plainByAddress.withLock { m in
            let left = (m[address] ?? 1) - 1
            m[address] = left > 0 ? left : nil
        }
    }
}

/// libmicrohttpd's upgrade callback: `cls` is the `ServerCore`, `conCls` the request's state.
let mhdUpgraded: MHD_UpgradeHandler = { cls, _, conCls, extraIn, extraSize, sock, urh in
    guard let cls, let urh else { return }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    var extra: [UInt8] = []
    if let extraIn, extraSize > 0 {
        extraIn.withMemoryRebound(to: UInt8.self, capacity: extraSize) { p in
            extra = Array(UnsafeBufferPointer(start: p, count: extraSize))
        }
    }
    guard let conCls else {
        _ = mb_mhd_upgrade_close(urh)
        return
    }
    let state = Unmanaged<RequestState>.fromOpaque(conCls).takeUnretainedValue()
    core.didUpgrade(state, fd: sock, extra: extra, urh: urh)
}

