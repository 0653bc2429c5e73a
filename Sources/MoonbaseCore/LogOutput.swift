import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where log lines go: standard error, written directly until `startBuffering` and, after it,
/// appended to a memory buffer that a background thread writes out every `intervalMillis`
/// (and any writer once it holds `flushBytes`), so a busy server pays no system call per line.
/// `flush()` writes what is pending (call it at shutdown; warnings and errors flush at once).
///
/// Thread-safety: the buffer is behind a mutex held only to append or swap; the writes to the
/// file descriptor are serialised by a second mutex, so chunks keep their order and lines never
/// interleave.
public enum LogOutput {
    struct State {
        var buffer: [UInt8] = []
        var buffered = false
    }

    static let state = Mutex(State())
    static let fdLock = Mutex(())
    /// Pending bytes that make the appending thread write them out itself.
    public static let flushBytes = 64 * 1024
    private static let flusherStarted = Atomic<Bool>(false)
    private static let intervalMicros = Atomic<Int>(100_000)

    /// Buffers from now on and starts the background flusher (once).
    public static func startBuffering(intervalMillis: Int = 100) {
        intervalMicros.store(max(1, intervalMillis) * 1000, ordering: .relaxed)
        state.withLock { $0.buffered = true }
        guard !flusherStarted.exchange(true, ordering: .acquiringAndReleasing) else { return }
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, { _ in
            while true {
                usleep(UInt32(LogOutput.intervalMicros.load(ordering: .relaxed)))
                LogOutput.flush()
            }
        }, nil)
        if rc != 0 {
            // No flusher thread: write each line directly, as before buffering.
            state.withLock { $0.buffered = false }
            flusherStarted.store(false, ordering: .relaxed)
        } else {
            pthread_detach(tid)
        }
    }

    /// Appends one or more whole lines; writes directly when not buffering.
    public static func write(_ bytes: UnsafeBufferPointer<UInt8>, urgent: Bool = false) {
        let pending = state.withLock { s -> Int in
            guard s.buffered else { return -1 }
            s.buffer.append(contentsOf: bytes)
            return s.buffer.count
        }
        if pending < 0 {
            fdLock.withLock { _ in writeAll(bytes) }
        } else if urgent || pending >= flushBytes {
            flush()
        }
    }

    /// Writes everything buffered so far.
    public static func flush() {
        fdLock.withLock { _ in
            var chunk: [UInt8] = []
            state.withLock { s in
                guard !s.buffer.isEmpty else { return }
                swap(&chunk, &s.buffer)
                s.buffer.reserveCapacity(min(chunk.count * 2, flushBytes * 2))
            }
            if !chunk.isEmpty { chunk.withUnsafeBufferPointer { writeAll($0) } }
        }
    }

    private static func writeAll(_ buf: UnsafeBufferPointer<UInt8>) {
        guard let base = buf.baseAddress else { return }
        var off = 0
        while off < buf.count {
            let n = Glibc.write(2, base + off, buf.count - off)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            off += n
        }
    }
}
