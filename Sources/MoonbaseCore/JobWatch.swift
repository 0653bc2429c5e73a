import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The running job's deadline on a worker thread, read by the worker pool's backstop.
///
/// A worker that has not returned by its job's deadline plus a grace is considered stuck (a C
/// loop the Lua hooks never interrupt, a wait that never ends): the pool answers its request,
/// abandons the thread and starts a replacement. A job starts with the pool's default limit;
/// code that legitimately runs longer (a Lua call with its own `timeoutMs`) raises it with
/// `noteLimit` from the worker thread. Off a pool thread `noteLimit` does nothing.
///
/// Thread-safety: the slot's fields are atomics; the thread-specific key is immutable.
public final class JobSlot: Sendable {
    /// Monotonic nanoseconds by which the current job should have returned; 0 = idle.
    public let deadline = Atomic<UInt64>(0)
    /// When the current job started (monotonic nanoseconds); 0 = idle.
    public let startedAt = Atomic<UInt64>(0)
    public init() {}
}

public enum JobWatch {
    private static let key: pthread_key_t = {
        var k = pthread_key_t()
        pthread_key_create(&k, nil)
        return k
    }()

    /// Binds `slot` to the calling thread (the pool does this once per worker; the slot must
    /// outlive the thread, which the pool guarantees by keeping it).
    public static func bind(_ slot: JobSlot) {
        pthread_setspecific(key, Unmanaged.passUnretained(slot).toOpaque())
    }

    /// The job on this thread may run `millis` from now: the deadline moves later, never earlier.
    public static func noteLimit(millis: Int64) {
        guard millis > 0, let raw = pthread_getspecific(key) else { return }
        let slot = Unmanaged<JobSlot>.fromOpaque(raw).takeUnretainedValue()
        let want = monotonicNanos() + UInt64(millis) * 1_000_000
        var cur = slot.deadline.load(ordering: .relaxed)
        while cur != 0 && cur < want {
            let (exchanged, now) = slot.deadline.compareExchange(expected: cur, desired: want, ordering: .relaxed)
            if exchanged { break }
            cur = now
        }
    }
}

/// What `/parse/health` reports beyond "the process answers": parts of the server that can
/// leave it unable to serve (every worker stuck, the store read-only) register a probe here.
/// One board per process (one server per process).
public final class HealthBoard: Sendable {
    public static let shared = HealthBoard()

    /// A probe answers nil when healthy, or a reason and its detail fields (JSON fragments).
    public typealias Probe = @Sendable () -> HealthProblem?

    private let probes = Mutex<[String: Probe]>([:])

    public func register(_ name: String, _ probe: @escaping Probe) {
        probes.withLock { $0[name] = probe }
    }

    public func unregister(_ name: String) {
        _ = probes.withLock { $0.removeValue(forKey: name) }
    }

    /// The current problems, sorted by name (empty = healthy).
    public func problems() -> [HealthProblem] {
        let ps = probes.withLock { m in m.sorted { $0.key < $1.key }.map(\.value) }
        return ps.compactMap { $0() }
    }
}

/// One reason the server cannot serve: `status` is the word reported (`saturated`,
/// `read-only`), `fields` extra JSON members (already encoded values).
public struct HealthProblem: Sendable {
    public var status: String
    public var fields: [(String, String)]
    public init(status: String, fields: [(String, String)]) {
        self.status = status
        self.fields = fields
    }
}
