import Synchronization

/// The app's charged units in the current UTC month, exact under concurrency without a lock.
///
/// One `UInt64` packs the month number (high 20 bits: months since 1970) and the count (low 44
/// bits, 1.7e13 requests), so "roll over to a new month" and "take one unit if under the limit"
/// are a single compare-and-swap: no request can slip through between a reset and a check.
///
/// Concurrency: `Sendable` (one `Atomic`).
final class MonthCounter: Sendable {
    private let packed = Atomic<UInt64>(0)
    private static let countBits: UInt64 = 44
    private static let countMask: UInt64 = (1 << countBits) - 1

    @inline(__always)
    private static func pack(_ month: Int64, _ count: Int64) -> UInt64 {
        (UInt64(truncatingIfNeeded: month) << countBits) | (UInt64(truncatingIfNeeded: count) & countMask)
    }

    @inline(__always)
    private static func unpack(_ v: UInt64) -> (month: Int64, count: Int64) {
        (Int64(truncatingIfNeeded: v >> countBits), Int64(truncatingIfNeeded: v & countMask))
    }

    /// Takes one unit of `month` unless the count has reached `limit` (0 = unlimited);
    /// `force` takes it regardless (master-key requests). Returns whether it was taken and the
    /// count after the call, and the month it was counted in (newer than `month` if the clock
    /// stepped back across a boundary).
    func acquire(month: Int64, limit: Int64, force: Bool) -> (taken: Bool, count: Int64, month: Int64) {
        var old = packed.load(ordering: .relaxed)
        while true {
            let (m, c) = Self.unpack(old)
            // A clock stepped back across a month boundary keeps counting in the newer month.
            let target = max(month, m)
            let current = m == target ? c : 0
            if !force && limit > 0 && current >= limit { return (false, current, target) }
            let (exchanged, original) = packed.compareExchange(
                expected: old, desired: Self.pack(target, current + 1), ordering: .relaxed)
            if exchanged { return (true, current + 1, target) }
            old = original
        }
    }

    /// Gives back one unit taken from `month` (a refunded request); no-op after a rollover.
    func release(month: Int64) {
        var old = packed.load(ordering: .relaxed)
        while true {
            let (m, c) = Self.unpack(old)
            guard m == month, c > 0 else { return }
            let (exchanged, original) = packed.compareExchange(
                expected: old, desired: Self.pack(month, c - 1), ordering: .relaxed)
            if exchanged { return }
            old = original
        }
    }

    /// Units counted in `month` so far.
    func count(month: Int64) -> Int64 {
        let (m, c) = Self.unpack(packed.load(ordering: .relaxed))
        return m == month ? c : 0
    }

    /// Raises the count of `month` to at least `count` (restoring after a restart).
    func restore(month: Int64, count: Int64) {
        var old = packed.load(ordering: .relaxed)
        while true {
            let (m, c) = Self.unpack(old)
            let current = m == month ? c : 0
            guard count > current else { return }
            let (exchanged, original) = packed.compareExchange(
                expected: old, desired: Self.pack(month, count), ordering: .relaxed)
            if exchanged { return }
            old = original
        }
    }

    /// Adds `delta` units to `month` (other hosts' units learnt after a flush); a counter still
    /// on an older month starts the new one at `delta`, one on a newer month is left alone.
    func add(month: Int64, _ delta: Int64) {
        guard delta > 0 else { return }
        var old = packed.load(ordering: .relaxed)
        while true {
            let (m, c) = Self.unpack(old)
            guard m <= month else { return }
            let (exchanged, original) = packed.compareExchange(
                expected: old, desired: Self.pack(month, (m == month ? c : 0) + delta), ordering: .relaxed)
            if exchanged { return }
            old = original
        }
    }
}
