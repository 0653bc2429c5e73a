import MoonbaseCore
import Synchronization
import Testing

@testable import MoonbaseQuota

/// A database shared by several hosts, in memory: the app's units (added by every flush) and
/// each window as one part per host (replaced by that host's flushes), summed when read.
final class SharedMemoryDatabase: Sendable {
    struct State {
        var units: Int64 = 0
        var parts: [String: [String: Int64]] = [:]
    }
    let state = Mutex(State())

    func host(_ name: String) -> HostSink { HostSink(db: self, name: name) }

    struct HostSink: UsageSink {
        let db: SharedMemoryDatabase
        let name: String

        func write(_ batch: UsageBatch) throws {
            _ = try writeReadingShared(batch, monthStart: .min, monthEnd: .max, minute: 0)
        }
        func loadTotals(monthStart: Int64, monthEnd: Int64, minute: Int64) throws -> UsageSnapshot {
            db.state.withLock { s in
                UsageSnapshot(appMonthUnits: s.units, windows: s.parts.map { WindowCount(key: $0.key, minute: minute, count: $0.value.values.reduce(0, +)) })
            }
        }
        func writeReadingShared(_ batch: UsageBatch, monthStart: Int64, monthEnd: Int64, minute: Int64) throws -> SharedUsage? {
            db.state.withLock { s in
                for r in batch.rows where r.kind == .account && r.key == "app" { s.units += r.counts.units }
                for w in batch.windows { s.parts[w.key, default: [:]][name] = w.own }
                return SharedUsage(appMonthUnits: s.units, windows: s.parts.mapValues { $0.values.reduce(0, +) })
            }
        }
    }
}

@Suite("Quota shared by several hosts")
struct SharedQuotaTests {
    /// One request from `account`: counted toward the limits, then recorded.
    static func request(_ q: Quota, _ account: Account) -> Bool {
        let d = q.check(account: account, isMaster: false)
        q.record(RequestUsage(account: account, target: nil, refused: !d.allowed, dbReads: 0, dbWrites: 0,
                              luaCpuMicros: 0, wallMicros: 0, bytesIn: 0, bytesOut: 0))
        return d.allowed
    }

    @Test func theMonthlyQuotaCountsEveryHostsFlushedRequests() throws {
        let clock = ManualClock(millis: novemberEvening)
        let db = SharedMemoryDatabase()
        let a = Quota(config: QuotaConfig(monthlyRequests: 10), clock: clock)
        let b = Quota(config: QuotaConfig(monthlyRequests: 10), clock: clock)
        let fa = UsageFlusher(quota: a, sink: db.host("A")), fb = UsageFlusher(quota: b, sink: db.host("B"))
        try a.load(from: db.host("A"))
        try b.load(from: db.host("B"))
        for i in 0..<6 { #expect(Self.request(a, .user("u\(i)"))) }
        try fa.flushNow()
        try fb.flushNow()   // nothing of its own to write: it still reads the total
        #expect(b.monthUnits(now: clock.nowMillis()) == 6)
        for i in 0..<4 { #expect(Self.request(b, .user("v\(i)"))) }
        #expect(!Self.request(b, .user("v9")), "the cluster reached 10")
        // A has not read B's 4 yet: it may serve more, up to what its next flush reveals.
        #expect(Self.request(a, .user("w")))
        try fb.flushNow()
        try fa.flushNow()
        #expect(a.monthUnits(now: clock.nowMillis()) == 11)
        #expect(!Self.request(a, .user("w2")))
        #expect(db.state.withLock { $0.units } == 11)
    }

    @Test func perMinuteWindowsAddEveryHostsPart() throws {
        let clock = ManualClock(millis: novemberEvening)
        let db = SharedMemoryDatabase()
        let a = Quota(config: QuotaConfig(perMinute: 4), clock: clock)
        let b = Quota(config: QuotaConfig(perMinute: 4), clock: clock)
        let fa = UsageFlusher(quota: a, sink: db.host("A")), fb = UsageFlusher(quota: b, sink: db.host("B"))
        for _ in 0..<3 { #expect(Self.request(a, .user("z"))) }
        try fa.flushNow()
        #expect(Self.request(b, .user("z")))   // B did not know z yet
        try fb.flushNow()                       // writes its part (1), reads 3 + 1
        #expect(b.windowCount("user:z", now: clock.nowMillis()) == 4)
        #expect(!Self.request(b, .user("z")))
        try fa.flushNow()                       // A rewrites its part (3) and learns B's 1
        #expect(!Self.request(a, .user("z")))
        #expect(db.state.withLock { $0.parts["user:z"] } == ["A": 3, "B": 1])
        // A restarted host loads the sum as others' requests and adds its own part on top.
        let c = Quota(config: QuotaConfig(perMinute: 4), clock: clock)
        try c.load(from: db.host("C"))
        #expect(!Self.request(c, .user("z")))
        #expect(Self.request(c, .user("y")))
        try UsageFlusher(quota: c, sink: db.host("C")).flushNow()
        #expect(db.state.withLock { $0.parts["user:z"] } == ["A": 3, "B": 1], "C served none of z")
    }
}
