import CEpoll
import CWslay
import MoonbaseCore
import MoonbaseHTTP
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What the loop reports to the protocol layer. Called on the loop thread: must not block
/// (hand real work to the worker pool).
public protocol WebSocketDelegate: AnyObject, Sendable {
    func received(_ connection: WebSocketConnection, _ message: [UInt8], binary: Bool)
    /// A data frame above the message cap arrived; wslay closes the connection with 1009 next.
    func oversized(_ connection: WebSocketConnection)
    /// The connection is gone (closed by either side, dropped for missed pongs, or the loop
    /// stopped). Called once.
    func closed(_ connection: WebSocketConnection)
}

/// One epoll thread holding many upgraded sockets: reads frames, writes queued messages, pings
/// every `pingInterval` and drops peers that miss two pongs. No thread per connection and no
/// work on the HTTP worker pool.
///
/// Thread-safety (`@unchecked Sendable`): `connections` and the epoll set are touched only by
/// the loop thread; other threads talk to it through `inbox` (mutex) and the eventfd.
public final class WebSocketLoop: @unchecked Sendable {
    let ep: Int32
    let wakeFD: Int32
    let pingNanos: UInt64
    let maxMessage: Int
    weak var delegate: (any WebSocketDelegate)?
    private var connections: [UInt64: WebSocketConnection] = [:]
    private struct Inbox {
        var added: [WebSocketConnection] = []
        var dirty: [WebSocketConnection] = []
        var stopping = false
    }
    private let inbox = Mutex(Inbox())
    private let wakePending = Atomic<Bool>(false)
    private var thread = pthread_t()
    private let finished = Atomic<Bool>(false)
    /// Close frames not answered by then: the socket is released anyway.
    static let closeGraceNanos: UInt64 = 2_000_000_000

    init(pingInterval: Duration, maxMessage: Int, delegate: any WebSocketDelegate) throws(ParseError) {
        ep = mb_epoll_create()
        wakeFD = mb_eventfd()
        guard ep >= 0, wakeFD >= 0 else { throw ParseError.internalError("websocket loop: cannot create epoll/eventfd") }
        let (s, atto) = pingInterval.components
        pingNanos = UInt64(max(0, s)) * 1_000_000_000 + UInt64(max(0, atto) / 1_000_000_000)
        self.maxMessage = maxMessage
        self.delegate = delegate
        _ = mb_epoll_add(ep, wakeFD, MB_EV_IN, 1, 0)
        let box = Unmanaged.passRetained(self).toOpaque()
        let rc = pthread_create(&thread, nil, { arg in
            let loop = Unmanaged<WebSocketLoop>.fromOpaque(arg!).takeRetainedValue()
            loop.run()
            return nil
        }, box)
        guard rc == 0 else {
            Unmanaged<WebSocketLoop>.fromOpaque(box).release()
            throw ParseError.internalError("websocket loop: cannot start thread (\(rc))")
        }
    }

    /// Adopts an upgraded socket (any thread). Once the loop is stopping the socket is closed
    /// here instead (a 101 sent just before shutdown): the socket is ours, nothing else would.
    func add(_ c: WebSocketConnection) {
        c.loop = self
        let taken = inbox.withLock { b -> Bool in
            if b.stopping { return false }
            b.added.append(c)
            return true
        }
        guard taken else {
            c.tearDown()
            c.socket.close()
            delegate?.closed(c)
            return
        }
        wake()
    }

    /// The connection has something to send or a close to perform (any thread).
    func schedule(_ c: WebSocketConnection) {
        inbox.withLock { $0.dirty.append(c) }
        wake()
    }

    private func wake() {
        if !wakePending.exchange(true, ordering: .acquiringAndReleasing) { mb_eventfd_signal(wakeFD) }
    }

    /// Closes every connection (the delegate hears `closed` for each) and ends the thread.
    func stop() {
        inbox.withLock { $0.stopping = true }
        wake()
        while !finished.load(ordering: .acquiring) { usleep(1_000) }
        pthread_join(thread, nil)
    }

    // MARK: the loop thread

    private func run() {
        var events = [mb_event](repeating: mb_event(), count: 256)
        var nextTick = monotonicNanos() + 1_000_000_000
        var stopping = false
        while true {
            let now0 = monotonicNanos()
            let timeout = Int32(clamping: (nextTick > now0 ? (nextTick - now0) / 1_000_000 : 0) + 1)
            let n = events.withUnsafeMutableBufferPointer { mb_epoll_wait(ep, $0.baseAddress, 256, timeout) }
            if n > 0 {
                for i in 0..<Int(n) {
                    let ev = events[i]
                    if ev.token == 0 {
                        // Drain first, then re-arm: the other order loses a wake-up that lands
                        // between the two (its signal drained while the flag stays set), after
                        // which no `wake()` signals again and queued sends wait for the next
                        // tick (up to a second). The inbox is read below, after re-arming, so
                        // a sender that saw the flag still set is picked up in this turn.
                        mb_eventfd_drain(wakeFD)
                        wakePending.store(false, ordering: .sequentiallyConsistent)
                        continue
                    }
                    guard let c = connections[ev.token] else { continue }
                    if ev.events & (MB_EV_IN | MB_EV_HUP | MB_EV_ERR | MB_EV_RDHUP) != 0 { readable(c) }
                    if !c.torndown { pump(c) }
                }
            }
            let (added, dirty, stop) = inbox.withLock { b -> ([WebSocketConnection], [WebSocketConnection], Bool) in
                let r = (b.added, b.dirty, b.stopping)
                b.added = []
                b.dirty = []
                return r
            }
            for c in added { adopt(c) }
            for c in dirty where !c.torndown && c.ctx != nil {
                if c.drainOutbox() && c.closeDeadlineNanos == 0 {
                    c.closeDeadlineNanos = monotonicNanos() + WebSocketLoop.closeGraceNanos
                }
                pump(c)
            }
            if stop && !stopping {
                stopping = true
                for c in Array(connections.values) {
                    c.close(code: 1001, reason: "server shutting down")
                    _ = c.drainOutbox()
                    pump(c)
                    teardown(c)
                }
                break
            }
            let now = monotonicNanos()
            if now >= nextTick {
                nextTick = now + 1_000_000_000
                tick(now)
            }
        }
        finished.store(true, ordering: .releasing)
    }

    private func adopt(_ c: WebSocketConnection) {
        mb_sock_prepare(c.socket.fd)
        guard c.setUp(maxMessage: maxMessage),
              mb_epoll_add(ep, c.socket.fd, MB_EV_IN | MB_EV_OUT | MB_EV_RDHUP, 1, c.id) == 0 else {
            c.tearDown()
            c.socket.close()
            delegate?.closed(c)
            return
        }
        connections[c.id] = c
        c.lastPingNanos = monotonicNanos()
        // Frames that arrived with the handshake are already buffered: parse them now.
        readable(c)
        if !c.torndown {
            if c.drainOutbox() { c.closeDeadlineNanos = monotonicNanos() + WebSocketLoop.closeGraceNanos }
            pump(c)
        }
    }

    private func readable(_ c: WebSocketConnection) {
        guard let ctx = c.ctx else { return }
        if wslay_event_want_read(ctx) != 0 && !c.discarding {
            if wslay_event_recv(ctx) != 0 {
                teardown(c)
                return
            }
        } else {
            // After our close frame: discard input until the peer closes.
            var scratch = [UInt8](repeating: 0, count: 4096)
            while true {
                let r = scratch.withUnsafeMutableBytes { mb_sock_recv(c.socket.fd, $0.baseAddress, 4096) }
                if r > 0 { continue }
                if r == 0 || (r != -Int(EAGAIN) && r != -Int(EWOULDBLOCK)) { teardown(c); return }
                break
            }
        }
    }

    /// Writes what wslay holds; tears down once both sides are done.
    private func pump(_ c: WebSocketConnection) {
        guard let ctx = c.ctx else { return }
        // Two writers share the socket: our data frames (`out`) and wslay's control frames.
        // Neither may start while the other is inside a frame: a partly written `out` is
        // finished before wslay writes, and `out` waits while wslay still holds bytes.
        if c.outSent > 0, !c.flushOut() {
            teardown(c)
            return
        }
        if c.outSent == 0 {
            if wslay_event_want_write(ctx) != 0, wslay_event_send(ctx) != 0 {
                teardown(c)
                return
            }
            if wslay_event_get_close_sent(ctx) != 0 {
                // Nothing may follow a close frame (wslay answered the peer's close).
                c.out = []
            } else if !c.out.isEmpty, wslay_event_want_write(ctx) == 0, !c.flushOut() {
                teardown(c)
                return
            }
        }
        if c.pendingClose != nil {
            c.queuePendingClose()
            if c.pendingClose == nil, wslay_event_send(ctx) != 0 {
                teardown(c)
                return
            }
        }
        c.updateQueued()
        if wslay_event_get_close_sent(ctx) != 0 && c.closeDeadlineNanos == 0 {
            c.closeDeadlineNanos = monotonicNanos() + WebSocketLoop.closeGraceNanos
        }
        // Both close frames exchanged (or the peer's close answered): done.
        if wslay_event_want_read(ctx) == 0 && wslay_event_want_write(ctx) == 0 && c.out.isEmpty { teardown(c) }
    }

    private func tick(_ now: UInt64) {
        // Each connection leaves ~10 KiB of freed heap (wslay's buffers, our state) that malloc
        // keeps; after a wave of disconnects give the pages back to the system.
        if closedSinceTrim >= 64 {
            closedSinceTrim = 0
            mb_malloc_trim()
        }
        for c in Array(connections.values) {
            if c.closeDeadlineNanos != 0 {
                if now >= c.closeDeadlineNanos { teardown(c) }
                continue
            }
            guard pingNanos > 0, now &- c.lastPingNanos >= pingNanos else { continue }
            if c.unansweredPings >= 2 {
                teardown(c)
                continue
            }
            c.unansweredPings += 1
            c.lastPingNanos = now
            c.queuePing()
            pump(c)
        }
    }

    private var closedSinceTrim = 0

    private func teardown(_ c: WebSocketConnection) {
        guard !c.torndown else { return }
        c.torndown = true
        closedSinceTrim += 1
        _ = mb_epoll_del(ep, c.socket.fd)
        connections[c.id] = nil
        c.tearDown()
        c.socket.close()
        delegate?.closed(c)
    }

    /// Connections held by this loop (loop thread's view; diagnostics).
    var count: Int { connections.count }
}
