import MoonbaseCore
import Synchronization

/// In-memory usage counters: deltas per (kind, key, hour), not yet written to the sink.
///
/// Concurrency: `Sendable` behind lock stripes. Each thread writes to the stripe its `ThreadSlot`
/// picks, so with at least as many stripes as request threads no two threads share a lock on the
/// hot path; the flusher visits every stripe once per flush and swaps its table out (O(1) under
/// the lock), so it holds each lock only briefly. Every `add` lands in exactly one stripe and is
/// either in a drained batch or still pending, which keeps totals exact.
final class UsageAggregator: Sendable {
    /// One stripe's pending deltas. The app row, touched by every request, is kept outside the
    /// dictionary (one hash fewer per request) for the current hour.
    struct Table: Sendable {
        var appHour: Int64 = .min
        var app = UsageCounts()
        var rows: [UsageBucket: UsageCounts] = [:]

        @inline(__always)
        mutating func addApp(_ counts: UsageCounts, hour: Int64) {
            if hour != appHour {
                flushApp()
                appHour = hour
            }
            app.add(counts)
        }

        /// Moves the app counts into `rows` (on an hour change and when drained).
        mutating func flushApp() {
            guard !app.isZero else { return }
            rows[UsageBucket(kind: .account, key: "app", hour: appHour), default: UsageCounts()].add(app)
            app = UsageCounts()
        }
    }

    private let stripes: [Stripe<Table>]
    private let mask: Int

    init(stripes requested: Int) {
        let n = stripeCount(requested)
        stripes = (0..<n).map { _ in Stripe(Table()) }
        mask = n - 1
    }

    /// Adds one request's counts to the app row, its account row and its target row for `hour`.
    func add(_ usage: RequestUsage, hour: Int64) {
        let counts = usage.counts
        let stripe = stripes[threadSlot.value.index & mask]
        stripe.state.withLock { table in
            table.addApp(counts, hour: hour)
            if let account = usage.account, account != .app {
                table.rows[UsageBucket(kind: .account, key: account.key, hour: hour), default: UsageCounts()].add(counts)
            }
            if let target = usage.target {
                table.rows[UsageBucket(kind: .function, key: target.key, hour: hour), default: UsageCounts()].add(counts)
            }
        }
    }

    /// Adds counts to an account's row and the app's (realtime events: no unit, no target).
    func add(_ counts: UsageCounts, account: Account, hour: Int64) {
        let stripe = stripes[threadSlot.value.index & mask]
        stripe.state.withLock { table in
            table.addApp(counts, hour: hour)
            if account != .app {
                table.rows[UsageBucket(kind: .account, key: account.key, hour: hour), default: UsageCounts()].add(counts)
            }
        }
    }

    /// Adds already-aggregated rows back (a batch whose write failed).
    func add(rows: [UsageRow]) {
        let stripe = stripes[threadSlot.value.index & mask]
        stripe.state.withLock { table in
            for row in rows { table.rows[row.bucket, default: UsageCounts()].add(row.counts) }
        }
    }

    /// Takes every pending delta, leaving the counters empty.
    func drain() -> [UsageBucket: UsageCounts] {
        var merged: [UsageBucket: UsageCounts] = [:]
        for stripe in stripes {
            let taken = stripe.state.withLock { table -> [UsageBucket: UsageCounts] in
                table.flushApp()
                let t = table.rows
                table.rows = [:]
                return t
            }
            if merged.isEmpty { merged = taken; continue }
            for (bucket, counts) in taken { merged[bucket, default: UsageCounts()].add(counts) }
        }
        return merged
    }

    /// The pending deltas without taking them.
    func peek() -> [UsageBucket: UsageCounts] {
        var merged: [UsageBucket: UsageCounts] = [:]
        for stripe in stripes {
            var copy = stripe.state.withLock { $0 }
            copy.flushApp()
            for (bucket, counts) in copy.rows { merged[bucket, default: UsageCounts()].add(counts) }
        }
        return merged
    }
}
