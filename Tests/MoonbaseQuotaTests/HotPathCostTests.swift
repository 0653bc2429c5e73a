import Foundation
import MoonbaseCore
import Synchronization
import Testing

@testable import MoonbaseQuota

/// Measures the per-request cost of accounting with N threads, against one global mutex, to back
/// the "no contention on the hot path" claim. Figures are printed (timing on a shared machine is
/// not a pass/fail test); the counts are asserted.
@Suite("Hot-path cost (printed)", .timeLimit(.minutes(1)))
struct HotPathCostTests {
    static let threads = 4
    static let perThread = 40_000

    static func timed(_ body: @escaping @Sendable (Int) -> Void) -> Double {
        let start = monotonicNanos()
        onThreads(threads, body)
        return Double(monotonicNanos() - start) / Double(threads * perThread)
    }

    @Test func stripedCountersVersusOneMutex() {
        let usage = RequestUsage(account: .user("u1"), target: .function("hello"), wallMicros: 12, bytesIn: 10, bytesOut: 20)
        let clock = ManualClock(millis: novemberEvening)
        let quota = Quota(clock: clock)
        let striped = Self.timed { _ in for _ in 0..<Self.perThread { quota.record(usage) } }

        // Baseline: the same work behind one global lock.
        let global = Mutex<[UsageBucket: UsageCounts]>([:])
        let single = Self.timed { _ in
            for _ in 0..<Self.perThread {
                let hour = UTCCalendar.hourStart(clock.nowMillis())
                global.withLock { t in
                    t[UsageBucket(kind: .account, key: "app", hour: hour), default: UsageCounts()].add(usage.counts)
                    t[UsageBucket(kind: .account, key: "user:u1", hour: hour), default: UsageCounts()].add(usage.counts)
                    t[UsageBucket(kind: .function, key: "function:hello", hour: hour), default: UsageCounts()].add(usage.counts)
                }
            }
        }

        let off = Quota(config: QuotaConfig(accountingEnabled: false), clock: clock)
        let disabled = Self.timed { _ in for _ in 0..<Self.perThread { off.record(usage) } }

        let checkFree = Self.timed { t in
            let account = Account.ip("10.0.0.\(t)")
            for _ in 0..<Self.perThread { _ = quota.check(account: account, isMaster: false) }
        }
        let limited = Quota(config: QuotaConfig(monthlyRequests: 1 << 40, perMinute: 1 << 40), clock: clock)
        let checkLimited = Self.timed { t in
            let account = Account.ip("10.0.0.\(t)")
            for _ in 0..<Self.perThread { _ = limited.check(account: account, isMaster: false) }
        }
        let metrics = ServerMetrics()
        let metricsCost = Self.timed { _ in
            for _ in 0..<Self.perThread { metrics.observe(route: "GET /hello", status: 200, seconds: 0.0001, usage: usage) }
        }

        print(String(format: "quota hot path, %d threads on %d cores, ns/request: record striped %.0f, one mutex %.0f, off %.1f; "
                     + "check no limits %.0f, check month+minute %.0f; metrics observe %.0f",
                     Self.threads, ProcessInfo.processInfo.activeProcessorCount,
                     striped, single, disabled, checkFree, checkLimited, metricsCost))
        let n = Int64(Self.threads * Self.perThread)
        #expect(quota.drainBatch(now: clock.nowMillis()).total(kind: .account, key: "app").units == n)
        #expect(global.withLock { $0.count } == 3)
        #expect(limited.monthUnits(now: clock.nowMillis()) == n)
    }
}
