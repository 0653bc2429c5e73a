import CEpoll
import CWslay
import MoonbaseCore
import MoonbaseHTTP
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One upgraded socket speaking RFC 6455 through libwslay.
///
/// Threads: the wslay context, `pending` input and the ping state belong to the connection's
/// loop thread. Other threads (workers answering a message, the realtime engine delivering an
/// event) only call `send(_:)` and `close(...)`, which go through the `outbox` mutex and wake
/// the loop. (`@unchecked Sendable` for that split.)
public final class WebSocketConnection: @unchecked Sendable {
    public let id: UInt64
    public let socket: UpgradedSocket
    public var remoteAddress: String { socket.remoteAddress }
    /// Set by the protocol layer (the LiveQuery client state of this connection).
    public let attachment = Mutex<AnyObject?>(nil)

    // Loop-thread state.
    var ctx: wslay_event_context_ptr?
    var pending: [UInt8]
    var pendingOffset = 0
    var lastPingNanos: UInt64 = 0
    var unansweredPings = 0
    var closeDeadlineNanos: UInt64 = 0
    var torndown = false
    /// Bytes of the data message being received (all its frames so far).
    var messageBytes: UInt64 = 0
    /// Input is thrown away (after an oversized message): only the close handshake remains.
    var discarding = false
    /// A close to queue once every queued message is out: wslay sends control frames ahead of
    /// data, so queuing it at once would drop the messages before it (a refusal's `error`).
    var pendingClose: (UInt16, String)?
    weak var loop: WebSocketLoop?
    /// Data frames framed here, not by wslay, written with one `send(2)` per pass whatever
    /// their number (wslay writes each message as two sends, header then payload, which was
    /// most of the loop's cost under a fan-out). `outSent` bytes of it are already written.
    /// wslay keeps the control frames (ping, pong, close); the two streams never interleave
    /// inside a frame (see `WebSocketLoop.pump`).
    var out: [UInt8] = []
    var outSent = 0

    struct Outbox {
        var messages: [(opcode: UInt8, bytes: [UInt8])] = []
        var bytes = 0
        /// Close requested: (status code, reason) sent after the queued messages.
        var close: (UInt16, String)?
        var closed = false
        var scheduled = false
    }
    let outbox = Mutex(Outbox())
    /// Bytes wslay still holds (updated by the loop after each send pass).
    let wslayQueued = Atomic<Int>(0)
    let sendLimit: Int

    init(id: UInt64, socket: UpgradedSocket, sendLimit: Int) {
        self.id = id
        self.socket = socket
        self.sendLimit = sendLimit
        pending = socket.extra
    }

    public enum SendResult { case queued, overflow, closed }

    /// Queues a text message. Over the send-queue limit nothing is queued and `.overflow` is
    /// returned: the caller decides how to close (LiveQuery sends an error with
    /// `reconnect: true`).
    @discardableResult
    public func send(_ text: [UInt8]) -> SendResult {
        let r = outbox.withLock { o -> (SendResult, Bool) in
            if o.closed || o.close != nil { return (.closed, false) }
            if o.bytes + text.count + wslayQueued.load(ordering: .relaxed) > sendLimit { return (.overflow, false) }
            o.messages.append((UInt8(WSLAY_TEXT_FRAME.rawValue), text))
            o.bytes += text.count
            let wake = !o.scheduled
            o.scheduled = true
            return (.queued, wake)
        }
        if r.1 { loop?.schedule(self) }
        return r.0
    }

    /// Sends `last` (if any) ahead of anything still queued, then a close frame; the socket is
    /// released once the close is out (or after a short grace if the peer does not read).
    public func close(code: UInt16 = 1000, reason: String = "", last: [UInt8]? = nil, dropQueued: Bool = false) {
        let wake = outbox.withLock { o -> Bool in
            if o.closed || o.close != nil { return false }
            if dropQueued {
                o.messages.removeAll()
                o.bytes = 0
            }
            if let last {
                o.messages.append((UInt8(WSLAY_TEXT_FRAME.rawValue), last))
                o.bytes += last.count
            }
            o.close = (code, reason)
            let wake = !o.scheduled
            o.scheduled = true
            return wake
        }
        if wake { loop?.schedule(self) }
    }

    /// True once the connection is gone (closed by either side).
    public var isClosed: Bool { outbox.withLock { $0.closed } }

    // MARK: loop-thread side

    /// Creates the wslay context (server side, 64 KiB message cap).
    func setUp(maxMessage: Int) -> Bool {
        var cbs = wslay_event_callbacks()
        cbs.recv_callback = wsRecv
        cbs.send_callback = wsSend
        cbs.on_frame_recv_start_callback = wsFrameStart
        cbs.on_msg_recv_callback = wsMessage
        var c: wslay_event_context_ptr?
        let me = Unmanaged.passUnretained(self).toOpaque()
        guard wslay_event_context_server_init(&c, &cbs, me) == 0, let c else { return false }
        // The message cap is enforced in `wsFrameStart` (an `error` goes out before the close).
        wslay_event_config_set_max_recv_msg_length(c, UInt64(Int64.max))
        ctx = c
        return true
    }

    /// Moves the outbox into wslay. Returns true when a close was requested.
    func drainOutbox() -> Bool {
        guard let ctx else { return false }
        let (msgs, close) = outbox.withLock { o -> ([(opcode: UInt8, bytes: [UInt8])], (UInt16, String)?) in
            let m = o.messages
            o.messages = []
            o.bytes = 0
            o.scheduled = false
            let c = o.close
            if c != nil { o.close = (0, "") }  // taken: keeps later sends refused
            return (m, c)
        }
        // After a close frame nothing more may be written (wslay answers a peer's close itself).
        if wslay_event_get_close_sent(ctx) == 0 {
            for m in msgs { appendFrame(opcode: m.opcode, m.bytes) }
        }
        if let (code, reason) = close, code != 0 || !reason.isEmpty {
            pendingClose = (code, reason)
            return true
        }
        return close != nil
    }

    /// Queues the pending close once wslay has no message left to send.
    func queuePendingClose() {
        guard let ctx, let (code, reason) = pendingClose, out.isEmpty, wslay_event_get_queued_msg_count(ctx) == 0 else { return }
        pendingClose = nil
        var r = Array(reason.utf8.prefix(120))
        r.withUnsafeMutableBufferPointer { b in
            _ = wslay_event_queue_close(ctx, code, b.baseAddress, b.count)
        }
    }

    /// Queues a text message at once, behind those already framed (loop thread only: ahead of a
    /// close about to be queued).
    func queueNow(_ bytes: [UInt8]) {
        guard let ctx, wslay_event_get_close_sent(ctx) == 0 else { return }
        appendFrame(opcode: UInt8(WSLAY_TEXT_FRAME.rawValue), bytes)
    }

    /// Appends one unfragmented, unmasked frame (a server's frames are never masked).
    func appendFrame(opcode: UInt8, _ payload: [UInt8]) {
        // No reserveCapacity here: reserving the exact size per message would copy the whole
        // buffer on every append; appends grow it geometrically.
        let n = payload.count
        out.append(0x80 | opcode)
        if n < 126 {
            out.append(UInt8(n))
        } else if n < 65536 {
            out.append(126)
            out.append(UInt8(n >> 8))
            out.append(UInt8(n & 0xff))
        } else {
            out.append(127)
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8((UInt64(n) >> UInt64(shift)) & 0xff)) }
        }
        out.append(contentsOf: payload)
    }

    /// Writes what `out` holds. Returns false on a socket error; on EAGAIN keeps the rest (the
    /// socket's EPOLLOUT brings the loop back). Once all is written the buffer is freed: an idle
    /// connection holds no output memory.
    func flushOut() -> Bool {
        while outSent < out.count {
            let r = out.withUnsafeBufferPointer { b in
                mb_sock_send(socket.fd, b.baseAddress! + outSent, b.count - outSent, 0)
            }
            if r > 0 {
                outSent += r
                continue
            }
            if r == -Int(EAGAIN) || r == -Int(EWOULDBLOCK) { return true }
            return false
        }
        out = []
        outSent = 0
        return true
    }

    /// Bytes framed here and not yet written.
    var outPending: Int { out.count - outSent }

    func queuePing() {
        guard let ctx else { return }
        var msg = wslay_event_msg(opcode: UInt8(WSLAY_PING.rawValue), msg: nil, msg_length: 0)
        _ = wslay_event_queue_msg(ctx, &msg)
    }

    func updateQueued() {
        guard let ctx else { return }
        wslayQueued.store(Int(wslay_event_get_queued_msg_length(ctx)) + outPending, ordering: .relaxed)
    }

    /// Frees the wslay context (loop thread, after the socket left the epoll set).
    func tearDown() {
        outbox.withLock {
            $0.closed = true
            $0.messages = []
            $0.bytes = 0
        }
        if let ctx { wslay_event_context_free(ctx) }
        ctx = nil
        pending = []
        out = []
        outSent = 0
    }
}

private func conn(_ p: UnsafeMutableRawPointer?) -> WebSocketConnection {
    Unmanaged<WebSocketConnection>.fromOpaque(p!).takeUnretainedValue()
}

/// wslay wants bytes: first those libmicrohttpd read past the request, then the socket's.
private let wsRecv: wslay_event_recv_callback = { ctx, buf, len, _, user in
    let c = conn(user)
    if c.discarding {
        wslay_event_set_error(ctx, Int32(WSLAY_ERR_WOULDBLOCK.rawValue))
        return -1
    }
    if c.pendingOffset < c.pending.count {
        let n = min(len, c.pending.count - c.pendingOffset)
        c.pending.withUnsafeBufferPointer { src in
            buf!.update(from: src.baseAddress! + c.pendingOffset, count: n)
        }
        c.pendingOffset += n
        if c.pendingOffset == c.pending.count {
            c.pending = []
            c.pendingOffset = 0
        }
        return n
    }
    let r = mb_sock_recv(c.socket.fd, buf, len)
    if r > 0 { return r }
    if r == -Int(EAGAIN) || r == -Int(EWOULDBLOCK) {
        wslay_event_set_error(ctx, Int32(WSLAY_ERR_WOULDBLOCK.rawValue))
    } else {
        wslay_event_set_error(ctx, Int32(WSLAY_ERR_CALLBACK_FAILURE.rawValue))
    }
    return -1
}

private let wsSend: wslay_event_send_callback = { ctx, data, len, flags, user in
    let c = conn(user)
    let r = mb_sock_send(c.socket.fd, data, len, (flags & Int32(WSLAY_MSG_MORE.rawValue)) != 0 ? 1 : 0)
    if r >= 0 { return r }
    if r == -Int(EAGAIN) || r == -Int(EWOULDBLOCK) {
        wslay_event_set_error(ctx, Int32(WSLAY_ERR_WOULDBLOCK.rawValue))
    } else {
        wslay_event_set_error(ctx, Int32(WSLAY_ERR_CALLBACK_FAILURE.rawValue))
    }
    return -1
}

/// A frame header arrived: a data message growing past the cap gets a LiveQuery error, then a
/// 1009 close; its bytes are discarded.
private let wsFrameStart: wslay_event_on_frame_recv_start_callback = { _, arg, user in
    guard let arg else { return }
    let c = conn(user)
    let op = arg.pointee.opcode
    guard op < 8, !c.discarding else { return }
    c.messageBytes = (op == 0 ? c.messageBytes : 0) &+ arg.pointee.payload_length
    if c.messageBytes > UInt64(c.loop?.maxMessage ?? Int.max) {
        c.discarding = true
        c.loop?.delegate?.oversized(c)
        c.pendingClose = (1009, "message too big")
        c.closeDeadlineNanos = monotonicNanos() + WebSocketLoop.closeGraceNanos
    }
}

private let wsMessage: wslay_event_on_msg_recv_callback = { _, arg, user in
    guard let arg else { return }
    let c = conn(user)
    let op = arg.pointee.opcode
    if op == UInt8(WSLAY_PONG.rawValue) {
        c.unansweredPings = 0
        return
    }
    if op == UInt8(WSLAY_TEXT_FRAME.rawValue) || op == UInt8(WSLAY_BINARY_FRAME.rawValue) {
        let bytes = Array(UnsafeBufferPointer(start: arg.pointee.msg, count: arg.pointee.msg_length))
        c.loop?.delegate?.received(c, bytes, binary: op == UInt8(WSLAY_BINARY_FRAME.rawValue))
    }
}
