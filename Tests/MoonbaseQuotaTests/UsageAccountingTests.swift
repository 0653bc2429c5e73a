import Foundation
import MoonbaseCore
import Testing

@testable import MoonbaseQuota

@Suite("Usage accounting: exact totals, flushing, restart", .timeLimit(.minutes(1)))
struct UsageAccountingTests {
    static func usage(_ account: Account?, _ target: UsageTarget?, refused: Bool = false) -> RequestUsage {
        RequestUsage(account: account, target: target, refused: refused, dbReads: 3, dbWrites: 1,
                     luaCpuMicros: 250, wallMicros: 900, bytesIn: 100, bytesOut: 2_000)
    }

    @Test func oneRequestTouchesAppAccountAndTargetRows() {
        let clock = ManualClock(millis: novemberEvening)
        let quota = Quota(clock: clock)
        quota.record(Self.usage(.user("u1"), .function("stats")))
        quota.record(Self.usage(.ip("10.1.1.1"), .class("Post"), refused: true))
        let batch = quota.drainBatch(now: clock.nowMillis())
        let hour = ms("2026-11-29T20:00:00.000Z")
        #expect(batch.rows.allSatisfy { $0.hour == hour })
        #expect(batch.total(kind: .account, key: "app") ==
                UsageCounts(units: 1, refused: 1, dbReads: 6, dbWrites: 2, luaCpuMicros: 500, wallMicros: 1_800, bytesIn: 200, bytesOut: 4_000))
        #expect(batch.total(kind: .account, key: "user:u1").units == 1)
        #expect(batch.total(kind: .account, key: "ip:10.1.1.1") == UsageCounts(refused: 1, dbReads: 3, dbWrites: 1, luaCpuMicros: 250, wallMicros: 900, bytesIn: 100, bytesOut: 2_000))
        #expect(batch.total(kind: .function, key: "function:stats").units == 1)
        #expect(batch.total(kind: .function, key: "class:Post").refused == 1)
        #expect(batch.rows.count == 5)
        #expect(quota.drainBatch(now: clock.nowMillis()).isEmpty)
    }

    @Test func hoursSplitRows() {
        let clock = ManualClock(millis: ms("2026-11-29T20:59:59.999Z"))
        let quota = Quota(clock: clock)
        quota.record(Self.usage(nil, nil))
        clock.advance(byMillis: 1)
        quota.record(Self.usage(nil, nil))
        let rows = quota.drainBatch(now: clock.nowMillis()).rows
        #expect(rows.map(\.hour) == [ms("2026-11-29T20:00:00.000Z"), ms("2026-11-29T21:00:00.000Z")])
        #expect(rows.allSatisfy { $0.key == "app" && $0.counts.units == 1 })
    }

    @Test func exactTotalsUnderConcurrency() {
        let quota = Quota(clock: ManualClock(millis: novemberEvening))
        let threads = 8, perThread = 20_000
        onThreads(threads) { t in
            let account = Account.user("u\(t % 3)")
            for i in 0..<perThread { quota.record(Self.usage(account, .function(i % 2 == 0 ? "a" : "b"))) }
        }
        let batch = quota.drainBatch(now: novemberEvening)
        let n = Int64(threads * perThread)
        #expect(batch.total(kind: .account, key: "app").units == n)
        #expect(batch.total(kind: .account, key: "app").dbReads == 3 * n)
        #expect(batch.total(kind: .account).units == 2 * n)  // app + the caller row
        #expect(batch.total(kind: .function).units == n)
        #expect(batch.total(kind: .function, key: "function:a").units == n / 2)
    }

    @Test func flusherDeltasSumToTotalsWhileRequestsRun() throws {
        let clock = ManualClock(millis: novemberEvening)
        let quota = Quota(config: QuotaConfig(perMinute: 1_000_000), clock: clock)
        let sink = MemorySink()
        let flusher = UsageFlusher(quota: quota, sink: sink, intervalMillis: 5)
        flusher.start()
        let threads = 6, perThread = 15_000
        onThreads(threads) { t in
            for _ in 0..<perThread {
                let d = quota.check(account: .ip("10.0.0.\(t)"), isMaster: false)
                quota.record(Self.usage(.ip("10.0.0.\(t)"), .route(method: "GET", pattern: "/hello")), now: novemberEvening)
                #expect(d.allowed)
            }
        }
        flusher.shutdown()
        let n = Int64(threads * perThread)
        #expect(sink.total(.account, "app").units == n)
        #expect(sink.total(.account, "app").bytesOut == 2_000 * n)
        #expect(sink.total(.function, "route:GET /hello").units == n)
        for t in 0..<threads { #expect(sink.total(.account, "ip:10.0.0.\(t)").units == Int64(perThread)) }
        // Windows were written as absolute counts.
        let snapshot = try sink.loadTotals(monthStart: 0, monthEnd: .max, minute: UTCCalendar.minuteStart(novemberEvening))
        #expect(snapshot.windows.count == threads && snapshot.windows.allSatisfy { $0.count == Int64(perThread) })
        #expect(flusher.flushCount >= 1 && flusher.failureCount == 0)
        #expect(quota.pendingRows().isEmpty)
    }

    @Test func failedWriteIsRequeuedNotLost() throws {
        let clock = ManualClock(millis: novemberEvening)
        let quota = Quota(config: QuotaConfig(perMinute: 10), clock: clock)
        let sink = MemorySink()
        sink.state.withLock { $0.failNext = 1 }
        let flusher = UsageFlusher(quota: quota, sink: sink)
        _ = quota.check(account: .user("a"), isMaster: false)
        quota.record(Self.usage(.user("a"), nil))
        #expect(throws: SinkError.self) { try flusher.flushNow() }
        #expect(flusher.failureCount == 1 && sink.writes == 0)
        quota.record(Self.usage(.user("a"), nil))
        #expect(try flusher.flushNow() == 3)  // app row, user row, one window
        #expect(sink.total(.account, "app").units == 2)
        #expect(try flusher.flushNow() == 0)
        #expect(sink.writes == 1)  // the empty flush did not reach the sink
        let snap = try sink.loadTotals(monthStart: 0, monthEnd: .max, minute: UTCCalendar.minuteStart(novemberEvening))
        #expect(snap.windows == [WindowCount(key: "user:a", minute: UTCCalendar.minuteStart(novemberEvening), count: 1)])
    }

    @Test func countsSurviveARestart() throws {
        let clock = ManualClock(millis: ms("2026-11-29T20:00:05.000Z"))
        let config = QuotaConfig(monthlyRequests: 5, perMinute: 3)
        let sink = MemorySink()
        // Last month's usage must not count.
        sink.state.withLock { $0.rows[UsageBucket(kind: .account, key: "app", hour: ms("2026-10-31T23:00:00.000Z"))] = UsageCounts(units: 99) }
        do {
            let quota = Quota(config: config, clock: clock)
            let flusher = UsageFlusher(quota: quota, sink: sink)
            try quota.load(from: sink)
            for _ in 0..<2 {
                #expect(quota.check(account: .user("a"), isMaster: false).allowed)
                quota.record(Self.usage(.user("a"), nil))
            }
            #expect(quota.check(account: .user("b"), isMaster: false).allowed)
            quota.record(Self.usage(.user("b"), nil))
            flusher.shutdown()
        }
        clock.advance(byMillis: 20_000)
        let restarted = Quota(config: config, clock: clock)
        try restarted.load(from: sink)
        #expect(restarted.monthUnits(now: clock.nowMillis()) == 3)
        #expect(restarted.windowCount("user:a", now: clock.nowMillis()) == 2)
        let d = restarted.check(account: .user("a"), isMaster: false)
        // a's window (3rd of 3) is tighter than the month (4th of 5).
        #expect(d.allowed && d.rateLimit == RateLimitStatus(scope: .perMinute, limit: 3, remaining: 0, resetSeconds: 35))
        let r = restarted.check(account: .user("a"), isMaster: false)
        #expect(!r.allowed && r.rateLimit?.scope == .perMinute)
        #expect(restarted.check(account: .user("c"), isMaster: false).allowed)
        #expect(!restarted.check(account: .user("c"), isMaster: false).allowed)
        // Windows of another minute are not restored.
        clock.advance(byMillis: 60_000)
        let later = Quota(config: config, clock: clock)
        try later.load(from: sink)
        #expect(later.windowCount("user:a", now: clock.nowMillis()) == 0)
    }

    @Test func accountingOffRecordsNothing() {
        let clock = ManualClock(millis: novemberEvening)
        let quota = Quota(config: QuotaConfig(accountingEnabled: false, perMinute: 1), clock: clock)
        quota.record(Self.usage(.user("a"), .function("f")))
        quota.record(Self.usage(.user("a"), .function("f")), now: novemberEvening)
        #expect(quota.check(account: .user("a"), isMaster: false).allowed)
        #expect(!quota.check(account: .user("a"), isMaster: false).allowed)  // limits still hold
        #expect(quota.drainBatch(now: novemberEvening).isEmpty)
    }

    @Test func configFromEnvironment() throws {
        #expect(try QuotaConfig(environment: [:]) == QuotaConfig())
        let c = try QuotaConfig(environment: ["MOONBASE_ACCOUNTING": "off", "MOONBASE_QUOTA_MONTHLY_REQUESTS": "20",
                                              "MOONBASE_RATE_LIMIT_PER_MINUTE": " 60 "])
        #expect(!c.accountingEnabled && c.monthlyRequests == 20 && c.perMinute == 60)
        #expect(throws: QuotaConfigError.self) { try QuotaConfig(environment: ["MOONBASE_ACCOUNTING": "maybe"]) }
        #expect(throws: QuotaConfigError.self) { try QuotaConfig(environment: ["MOONBASE_QUOTA_MONTHLY_REQUESTS": "-1"]) }
        #expect(throws: QuotaConfigError.self) { try QuotaConfig(environment: ["MOONBASE_RATE_LIMIT_PER_MINUTE": "ten"]) }
    }

    @Test func accountKeysRoundTrip() {
        for a in [Account.app, .user("Ab12"), .ip("::1"), .ip("203.0.113.5")] { #expect(Account(key: a.key) == a) }
        #expect(Account(key: "user:") == nil && Account(key: "bogus") == nil)
        #expect(Account.caller(userId: nil, ip: "1.2.3.4") == .ip("1.2.3.4"))
        #expect(Account.caller(userId: "u", ip: "1.2.3.4") == .user("u"))
        #expect(UsageTarget.route(method: "GET", pattern: "/hello").key == "route:GET /hello")
    }

    @Test(arguments: [
        ("2026-11-29T20:23:45.678Z", "2026-11-01T00:00:00.000Z", "2026-12-01T00:00:00.000Z"),
        ("2026-12-31T23:59:59.999Z", "2026-12-01T00:00:00.000Z", "2027-01-01T00:00:00.000Z"),
        ("2028-02-29T12:00:00.000Z", "2028-02-01T00:00:00.000Z", "2028-03-01T00:00:00.000Z"),
        ("1970-01-01T00:00:00.000Z", "1970-01-01T00:00:00.000Z", "1970-02-01T00:00:00.000Z"),
        ("1969-12-31T23:59:59.999Z", "1969-12-01T00:00:00.000Z", "1970-01-01T00:00:00.000Z"),
    ])
    func utcMonths(_ t: String, _ start: String, _ next: String) {
        #expect(UTCCalendar.monthStart(ms(t)) == ms(start))
        #expect(UTCCalendar.nextMonthStart(ms(t)) == ms(next))
    }

    @Test func utcHoursMinutesAndSeconds() {
        #expect(UTCCalendar.hourStart(ms("2026-11-29T20:59:59.999Z")) == ms("2026-11-29T20:00:00.000Z"))
        #expect(UTCCalendar.hourCeil(ms("2026-11-29T20:00:00.001Z")) == ms("2026-11-29T21:00:00.000Z"))
        #expect(UTCCalendar.hourCeil(ms("2026-11-29T20:00:00.000Z")) == ms("2026-11-29T20:00:00.000Z"))
        #expect(UTCCalendar.minuteStart(-1) == -60_000)
        #expect(UTCCalendar.secondsUntil(10_001, from: 0) == 11)
        #expect(UTCCalendar.secondsUntil(10_000, from: 0) == 10)
        #expect(UTCCalendar.secondsUntil(5, from: 5) == 1)
    }
}
