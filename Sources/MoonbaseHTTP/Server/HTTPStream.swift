import CHTTPGuard
import CMicroHTTPD
import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A response body produced incrementally (Server-Sent Events and other long-lived streams).
///
/// Producers on any thread `write` bytes into a bounded buffer; libmicrohttpd pulls them from
/// its I/O thread. When the buffer is empty the pull suspends the connection (a pull that
/// returned 0 without suspending would make the I/O thread spin), and the next `write` or
/// `finish` resumes it. While suspended, libmicrohttpd neither times the connection out nor
/// notices a client that went away: producers that want to notice should write something now
/// and then (SSE's keep-alive comments do).
///
/// Thread-safety: all state is behind one mutex; the connection is suspended with that mutex
/// held and resumed only by whoever clears the `suspended` flag under it, so a resume never
/// precedes its suspend.
public final class HTTPStreamBody: Sendable {
    struct State {
        var chunks: [[UInt8]] = []
        var head = 0
        var offset = 0
        var buffered = 0
        var finished = false
        var aborted = false
        var suspended = false
        var closed = false
        /// The MHD connection (as an address: OpaquePointer is not Sendable), once answered.
        var connection: UInt = 0
        var onClose: (@Sendable () -> Void)?
    }

    /// Bytes buffered at most; a `write` beyond it fails (the producer drops the reader).
    public let maxBuffered: Int
    private let state = Mutex(State())

    public init(maxBuffered: Int = 1 << 20) { self.maxBuffered = maxBuffered }

    /// Called once when the connection ends (client gone, `finish`ed, aborted, shutdown).
    public func onClose(_ action: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { s -> Bool in
            if s.closed { return true }
            s.onClose = action
            return false
        }
        if runNow { action() }
    }

    /// Queues bytes. Returns false (and queues nothing) when the stream has ended or the
    /// bytes would take the buffer over `maxBuffered`.
    @discardableResult
    public func write(_ bytes: [UInt8]) -> Bool {
        guard !bytes.isEmpty else { return true }
        let (ok, resume) = state.withLock { s -> (Bool, UInt) in
            guard !s.finished, !s.closed, s.buffered + bytes.count <= maxBuffered else { return (false, 0) }
            s.chunks.append(bytes)
            s.buffered += bytes.count
            return (true, Self.takeSuspended(&s))
        }
        Self.resume(resume)
        return ok
    }

    /// Ends the stream once the buffered bytes are sent.
    public func finish() {
        Self.resume(state.withLock { s -> UInt in
            s.finished = true
            return Self.takeSuspended(&s)
        })
    }

    /// Ends the stream now, dropping what is buffered (a reader too slow to keep up).
    public func abort() {
        Self.resume(state.withLock { s -> UInt in
            s.finished = true
            s.aborted = true
            s.chunks = []
            s.head = 0
            s.offset = 0
            s.buffered = 0
            return Self.takeSuspended(&s)
        })
    }

    /// Bytes waiting to be sent.
    public var bufferedBytes: Int { state.withLock { $0.buffered } }

    private static func takeSuspended(_ s: inout State) -> UInt {
        guard s.suspended else { return 0 }
        s.suspended = false
        return s.connection
    }

    private static func resume(_ conn: UInt) {
        guard conn != 0, let c = OpaquePointer(bitPattern: conn) else { return }
        MHD_resume_connection(c)
    }

    // MARK: libmicrohttpd side (I/O thread)

    func attach(_ connection: OpaquePointer) {
        state.withLock { $0.connection = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection))) }
    }

    /// Fills `buf`: bytes, or -1 at the end, -2 after an abort, or 0 having suspended.
    func pull(_ buf: UnsafeMutablePointer<CChar>, _ max: Int) -> Int {
        state.withLock { s -> Int in
            if s.aborted { return -2 }
            if s.buffered == 0 {
                if s.finished { return -1 }
                guard s.connection != 0, let c = OpaquePointer(bitPattern: s.connection) else { return -2 }
                s.suspended = true
                MHD_suspend_connection(c)
                return 0
            }
            var n = 0
            while n < max, s.head < s.chunks.count {
                let chunk = s.chunks[s.head]
                let take = Swift.min(max - n, chunk.count - s.offset)
                chunk.withUnsafeBufferPointer { p in
                    (buf + n).withMemoryRebound(to: UInt8.self, capacity: take) { dst in
                        dst.update(from: p.baseAddress! + s.offset, count: take)
                    }
                }
                n += take
                s.offset += take
                if s.offset == chunk.count {
                    s.head += 1
                    s.offset = 0
                }
            }
            s.buffered -= n
            if s.head == s.chunks.count {
                s.chunks.removeAll(keepingCapacity: true)
                s.head = 0
            } else if s.head > 64 {
                s.chunks.removeFirst(s.head)
                s.head = 0
            }
            return n
        }
    }

    /// libmicrohttpd released the response: the connection is over.
    func closed() {
        let action = state.withLock { s -> (@Sendable () -> Void)? in
            s.closed = true
            s.finished = true
            s.chunks = []
            s.buffered = 0
            s.suspended = false
            let a = s.onClose
            s.onClose = nil
            return a
        }
        action?()
    }
}

/// Open streams, so a shutdown can end them (libmicrohttpd must not stop with suspended
/// connections).
final class StreamRegistry: Sendable {
    private let streams = Mutex<[ObjectIdentifier: HTTPStreamBody]>([:])

    func add(_ s: HTTPStreamBody) { streams.withLock { $0[ObjectIdentifier(s)] = s } }
    func remove(_ s: HTTPStreamBody) { streams.withLock { $0[ObjectIdentifier(s)] = nil } }
    func finishAll() {
        for s in streams.withLock({ Array($0.values) }) { s.finish() }
    }
}

/// libmicrohttpd's reader callback: `cls` is the retained `StreamBox`.
let mhdStreamReader: MHD_ContentReaderCallback = { cls, _, buf, max in
    guard let cls, let buf else { return -2 }
    let box = Unmanaged<StreamBox>.fromOpaque(cls).takeUnretainedValue()
    return box.stream.pull(buf, Int(max))
}

/// Releases the `StreamBox` when libmicrohttpd destroys the response.
let mhdStreamFree: MHD_ContentReaderFreeCallback = { cls in
    guard let cls else { return }
    let box = Unmanaged<StreamBox>.fromOpaque(cls).takeRetainedValue()
    box.registry.remove(box.stream)
    box.stream.closed()
}

/// What the C callbacks carry: the stream and the registry it is listed in.
final class StreamBox {
    let stream: HTTPStreamBody
    let registry: StreamRegistry
    init(_ stream: HTTPStreamBody, _ registry: StreamRegistry) {
        self.stream = stream
        self.registry = registry
    }
}

extension ServerCore {
    /// An MHD response that pulls from `stream` (chunked, unknown size).
    func streamResponse(_ stream: HTTPStreamBody, _ connection: OpaquePointer) -> OpaquePointer? {
        stream.attach(connection)
        streams.add(stream)
        let box = Unmanaged.passRetained(StreamBox(stream, streams)).toOpaque()
        guard let r = MHD_create_response_from_callback(UInt64.max, 16 << 10, mhdStreamReader, box, mhdStreamFree) else {
            Unmanaged<StreamBox>.fromOpaque(box).release()
            streams.remove(stream)
            stream.closed()
            return nil
        }
        return r
    }
}
