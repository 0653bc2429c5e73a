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
}

public enum HTTPUpgradeDecision: Sendable {
    case refuse(HTTPResponse)
    case accept(protocolName: String, headers: [(String, String)])
}

/// A connection switched to another protocol. libmicrohttpd still owns the descriptor: read and
/// write it (it is non-blocking) but never `close(2)` it; `close()` hands it back, and
/// libmicrohttpd closes it on its own thread.
///
/// Thread-safety: `fd` and `extra` are immutable; `close()` is idempotent and may be called from
/// any thread (libmicrohttpd takes its own lock and wakes its I/O thread).
public final class UpgradedSocket: @unchecked Sendable {
    /// The client socket (non-blocking).
    public let fd: Int32
    /// Bytes libmicrohttpd read past the request (the first frames of a quick client).
    public let extra: [UInt8]
    /// The client's numeric address.
    public let remoteAddress: String
    private let urh: OpaquePointer
    private let closed = Atomic<Bool>(false)
    private weak var core: ServerCore?

    init(fd: Int32, extra: [UInt8], remoteAddress: String, urh: OpaquePointer, core: ServerCore) {
        self.fd = fd
        self.extra = extra
        self.remoteAddress = remoteAddress
        self.urh = urh
        self.core = core
    }

    /// Gives the socket back to libmicrohttpd, which closes it. Stop polling `fd` first.
    public func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        core?.upgradedOpen.subtract(1, ordering: .relaxed)
        _ = mb_mhd_upgrade_close(urh)
    }

    public var isClosed: Bool { closed.load(ordering: .acquiring) }
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
            let cls = Unmanaged.passUnretained(self).toOpaque()
            guard let r = MHD_create_response_for_upgrade(mhdUpgraded, cls) else { return .NO }
            defer { MHD_destroy_response(r) }
            // libmicrohttpd adds `Connection: Upgrade` itself.
            _ = MHD_add_response_header(r, "Upgrade", name)
            for (k, v) in headers { _ = MHD_add_response_header(r, k, v) }
            return MHD_queue_response(state.connection, 101, r)
        }
    }

    /// The 101 was sent: hand the socket to the upgrade handler. The request no longer counts
    /// as in flight (a held WebSocket must not delay an HTTP shutdown's drain).
    func didUpgrade(_ state: RequestState, fd: Int32, extra: [UInt8], urh: OpaquePointer) {
        state.upgraded = true
        inFlight.subtract(1, ordering: .relaxed)
        upgradedOpen.add(1, ordering: .relaxed)
        let socket = UpgradedSocket(fd: fd, extra: extra, remoteAddress: state.request.remoteAddress, urh: urh,
                                    core: self)
        guard let upgrader else {
            socket.close()
            return
        }
        upgrader.upgraded(socket, request: state.request)
    }

    /// libmicrohttpd's accept policy: plain HTTP connections stay under `maxConnections`;
    /// upgraded ones have their own cap (kept by the upgrade handler) on top.
    func acceptsConnection() -> Bool {
        let plain = openConnections.load(ordering: .relaxed) - upgradedOpen.load(ordering: .relaxed)
        return plain < config.maxConnections
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

/// libmicrohttpd's accept policy callback (`cls` is the `ServerCore`).
let mhdAcceptPolicy: MHD_AcceptPolicyCallback = { cls, _, _ in
    guard let cls else { return .YES }
    return Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().acceptsConnection() ? .YES : .NO
}
