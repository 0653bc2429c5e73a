import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Time source injected into everything that reads "now" (sessions, quota windows, the scheduler),
/// so tests can drive time with `ManualClock` (Hummingbird's `MockClock`, swift-jobs).
public protocol HostClock: Sendable {
    /// Milliseconds since the Unix epoch.
    func nowMillis() -> Int64
}

/// The real wall clock (`CLOCK_REALTIME`).
public struct SystemClock: HostClock {
    public init() {}
    public func nowMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}

/// A clock tests move by hand.
public final class ManualClock: HostClock {
    private let now: Atomic<Int64>
    public init(millis: Int64) { now = Atomic(millis) }
    public func nowMillis() -> Int64 { now.load(ordering: .relaxed) }
    public func set(_ millis: Int64) { now.store(millis, ordering: .relaxed) }
    public func advance(byMillis ms: Int64) { _ = now.wrappingAdd(ms, ordering: .relaxed) }
}

/// Monotonic nanoseconds (`CLOCK_MONOTONIC`), for durations and deadlines.
@inline(__always)
public func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// CPU time of the calling thread in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`).
@inline(__always)
public func threadCPUNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}
