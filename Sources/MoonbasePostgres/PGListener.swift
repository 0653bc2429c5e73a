import CLibPQ
import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Listens on PostgreSQL channels (`LISTEN`) and delivers `NOTIFY` payloads on its own thread.
///
/// The thread waits with `poll` on the connection's socket, then `PQconsumeInput` and
/// `PQnotifies`. When the connection is lost (server restart, `pg_terminate_backend`), it
/// reconnects with a growing pause (0.1 s up to 2 s), listens again and calls `onReconnect`:
/// notifications sent meanwhile are lost, so the caller catches up from its own record (the
/// change feed) there. Callbacks run on the listener's thread, one at a time; keep them short.
///
/// ```swift
/// let l = try PGListener(url: url, channels: ["mb_changes"],
///                        onNotify: { channel, payload in print(channel, payload) },
///                        onReconnect: { print("catch up from the feed") })
/// try l.start()
/// // … later
/// l.stop()
/// ```
public final class PGListener: Sendable {
    public let url: String
    public let channels: [String]
    private let onNotify: @Sendable (String, String) -> Void
    private let onReconnect: @Sendable () -> Void
    private let stopping = Atomic<Bool>(false)
    private let started = Atomic<Bool>(false)
    private let thread = Mutex<pthread_t?>(nil)
    private let backend = Atomic<Int32>(0)
    private let reconnectCount = Atomic<Int>(0)
    private let connBox: ListenerConnectionBox

    /// - Throws: 112 when a channel is not a plain identifier (`LISTEN` takes no parameter, so
    ///   names are checked, then quoted).
    public init(url: String, channels: [String], onNotify: @escaping @Sendable (_ channel: String, _ payload: String) -> Void,
                onReconnect: @escaping @Sendable () -> Void = {}) throws(ParseError) {
        for c in channels where !PGListener.isValidChannel(c) {
            throw ParseError(.invalidChannelName, "invalid channel name: \(c)")
        }
        self.url = url
        self.channels = channels
        self.onNotify = onNotify
        self.onReconnect = onReconnect
        self.connBox = ListenerConnectionBox()
    }

    deinit { stop() }

    /// Channel names: a letter or `_`, then letters, digits or `_`, at most 63 bytes.
    public static func isValidChannel(_ name: String) -> Bool {
        guard let first = name.utf8.first, name.utf8.count <= 63 else { return false }
        func letter(_ b: UInt8) -> Bool { (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || b == 95 }
        return letter(first) && name.utf8.allSatisfy { letter($0) || ($0 >= 48 && $0 <= 57) }
    }

    /// The server process of the current listening connection (0 when disconnected).
    public var backendPID: Int32 { backend.load(ordering: .acquiring) }

    /// How many times the listener reconnected.
    public var reconnects: Int { reconnectCount.load(ordering: .acquiring) }

    /// Connects, listens, and starts the thread. Once `start` returns, notifications committed
    /// afterwards are delivered.
    /// - Throws: `ParseError` 503 when the server cannot be reached.
    public func start() throws(ParseError) {
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        do {
            connBox.connection = try connectAndListen()
        } catch {
            started.store(false, ordering: .releasing)
            throw error
        }
        let box = Unmanaged.passRetained(self).toOpaque()
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, { arg in
            let listener = Unmanaged<PGListener>.fromOpaque(arg!).takeRetainedValue()
            listener.loop()
            return nil
        }, box)
        if rc != 0 {
            Unmanaged<PGListener>.fromOpaque(box).release()
            connBox.connection?.close()
            connBox.connection = nil
            started.store(false, ordering: .releasing)
            throw ParseError.internalError("listener: pthread_create failed (\(rc))")
        }
        thread.withLock { $0 = tid }
    }

    /// Stops the thread (within one poll interval) and closes the connection. Idempotent.
    public func stop() {
        stopping.store(true, ordering: .releasing)
        if let tid = thread.withLock({ t -> pthread_t? in defer { t = nil }; return t }) {
            // The thread holds a reference to us: never join from our own thread.
            if pthread_equal(tid, pthread_self()) == 0 { pthread_join(tid, nil) } else { pthread_detach(tid) }
        }
    }

    private func connectAndListen() throws(ParseError) -> PGConnection {
        let c = try PGConnection(url: url)
        for ch in channels { try c.executeScript("LISTEN \"\(ch)\"") }
        backend.store(c.backendPID, ordering: .releasing)
        return c
    }

    private var isStopping: Bool { stopping.load(ordering: .acquiring) }

    private func loop() {
        var pause: UInt32 = 100_000
        while !isStopping {
            guard let conn = connBox.connection else {
                usleep(pause)
                if isStopping { break }
                do {
                    connBox.connection = try connectAndListen()
                    pause = 100_000
                    reconnectCount.add(1, ordering: .acquiringAndReleasing)
                    onReconnect()
                } catch {
                    pause = min(pause * 2, 2_000_000)
                }
                continue
            }
            if !pump(conn) {
                Log.warn("postgres listener: connection lost, reconnecting")
                backend.store(0, ordering: .releasing)
                conn.close()
                connBox.connection = nil
            }
        }
        connBox.connection?.close()
        connBox.connection = nil
        backend.store(0, ordering: .releasing)
    }

    /// Waits up to 100 ms for input and delivers what arrived; false when the connection broke.
    private func pump(_ conn: PGConnection) -> Bool {
        let fd = PQsocket(conn.handle)
        guard fd >= 0 else { return false }
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let n = poll(&p, 1, 100)
        if n < 0 { return errno == EINTR }
        if n == 0 { return true }
        guard PQconsumeInput(conn.handle) != 0 else { return false }
        while let note = PQnotifies(conn.handle) {
            let channel = String(cString: note.pointee.relname)
            let payload = String(cString: note.pointee.extra)
            PQfreemem(note)
            onNotify(channel, payload)
        }
        return PQstatus(conn.handle) == CONNECTION_OK
    }
}

/// The listening connection. `@unchecked Sendable`: set in `start` before the thread exists,
/// then touched only by the listener's thread (pthread_create orders the hand-over).
private final class ListenerConnectionBox: @unchecked Sendable {
    var connection: PGConnection?
}
