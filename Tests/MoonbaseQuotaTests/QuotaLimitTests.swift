import MoonbaseCore
import Testing

@testable import MoonbaseQuota

@Suite("Quota limits: monthly quota, per-minute windows, function limits, RateLimit values")
struct QuotaLimitTests {
    @Test func noLimitsMeansNoHeadersAndAlwaysAllowed() {
        let quota = Quota(config: QuotaConfig(), clock: ManualClock(millis: novemberEvening))
        for _ in 0..<100 {
            let d = quota.check(account: .ip("10.0.0.1"), isMaster: false)
            #expect(d.allowed && d.rateLimit == nil && d.headers.isEmpty && d.error == nil)
        }
    }

    @Test func monthlyQuotaExhaustsAndResetsAtTheUTCMonthBoundary() throws {
        let clock = ManualClock(millis: ms("2026-11-30T23:59:00.000Z"))
        let quota = Quota(config: QuotaConfig(monthlyRequests: 20), clock: clock)
        for i in 1...20 {
            let d = quota.check(account: .user("u\(i % 3)"), isMaster: false)
            #expect(d.allowed)
            #expect(d.rateLimit == RateLimitStatus(scope: .monthly, limit: 20, remaining: Int64(20 - i), resetSeconds: 60))
        }
        let refused = quota.check(account: .user("u1"), isMaster: false)
        #expect(!refused.allowed)
        #expect(refused.retryAfterSeconds == 60)
        let error = try #require(refused.error)
        #expect(error.code == .requestLimitExceeded && error.httpStatus == 429)
        #expect(error.headers.contains { $0 == ("Retry-After", "60") })
        #expect(error.headers.contains { $0 == ("RateLimit-Remaining", "0") })
        #expect(quota.monthUnits(now: clock.nowMillis()) == 20)

        clock.set(ms("2026-11-30T23:59:59.999Z"))
        #expect(!quota.check(account: .user("u1"), isMaster: false).allowed)
        clock.set(ms("2026-12-01T00:00:00.000Z"))
        let fresh = quota.check(account: .user("u1"), isMaster: false)
        #expect(fresh.allowed)
        #expect(fresh.rateLimit?.remaining == 19)
        let december: Int64 = 31 * 86_400
        #expect(fresh.rateLimit?.resetSeconds == december, "\(String(describing: fresh.rateLimit))")
    }

    @Test func perUserAndPerIPWindowsAreSeparate() {
        let clock = ManualClock(millis: ms("2026-11-29T20:00:10.000Z"))
        let quota = Quota(config: QuotaConfig(perMinute: 3), clock: clock)
        for _ in 0..<3 { #expect(quota.check(account: .user("alice"), isMaster: false).allowed) }
        let refused = quota.check(account: .user("alice"), isMaster: false)
        #expect(!refused.allowed && refused.retryAfterSeconds == 50)
        #expect(refused.rateLimit == RateLimitStatus(scope: .perMinute, limit: 3, remaining: 0, resetSeconds: 50))
        // Bob, and anonymous callers from alice's address, have their own windows.
        #expect(quota.check(account: .user("bob"), isMaster: false).allowed)
        for i in 0..<3 {
            let d = quota.check(account: .ip("192.0.2.7"), isMaster: false)
            #expect(d.allowed && d.rateLimit?.remaining == Int64(2 - i))
        }
        #expect(!quota.check(account: .ip("192.0.2.7"), isMaster: false).allowed)
        #expect(quota.check(account: .ip("192.0.2.8"), isMaster: false).allowed)
        // Refused requests take no slot: the window holds exactly the limit.
        #expect(quota.windowCount("user:alice", now: clock.nowMillis()) == 3)
        // The next minute is a new window.
        clock.set(ms("2026-11-29T20:01:00.000Z"))
        let next = quota.check(account: .user("alice"), isMaster: false)
        #expect(next.allowed && next.rateLimit?.remaining == 2 && next.rateLimit?.resetSeconds == 60)
    }

    @Test func masterIsCountedButNeverRefused() {
        let clock = ManualClock(millis: novemberEvening)
        let quota = Quota(config: QuotaConfig(monthlyRequests: 2, perMinute: 1), clock: clock)
        #expect(quota.check(account: .ip("203.0.113.1"), isMaster: false).allowed)
        for _ in 0..<50 {
            let d = quota.check(account: .ip("203.0.113.1"), function: .function("stats", perMinute: 1), isMaster: true)
            #expect(d.allowed && d.headers.isEmpty)
        }
        #expect(quota.monthUnits(now: clock.nowMillis()) == 51)
        let d = quota.check(account: .ip("203.0.113.2"), isMaster: false)
        #expect(!d.allowed && d.rateLimit?.scope == .monthly)
    }

    @Test func functionLimitIsPerCallerAndTightest() {
        let clock = ManualClock(millis: ms("2026-11-29T20:00:30.000Z"))
        let quota = Quota(config: QuotaConfig(monthlyRequests: 1000, perMinute: 10), clock: clock)
        let stats = FunctionLimit.function("stats", perMinute: 2)
        let first = quota.check(account: .user("a"), function: stats, isMaster: false)
        #expect(first.rateLimit == RateLimitStatus(scope: .function, limit: 2, remaining: 1, resetSeconds: 30))
        #expect(first.headers.map(\.0) == ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"])
        #expect(first.headers.map(\.1) == ["2", "1", "30"])
        #expect(quota.check(account: .user("a"), function: stats, isMaster: false).allowed)
        let refused = quota.check(account: .user("a"), function: stats, isMaster: false)
        #expect(!refused.allowed && refused.rateLimit?.scope == .function)
        #expect(refused.error?.message.contains("function rate limit") == true)
        // Not refused elsewhere: another user, another function, or no function.
        #expect(quota.check(account: .user("b"), function: stats, isMaster: false).allowed)
        #expect(quota.check(account: .user("a"), function: .function("other", perMinute: 2), isMaster: false).allowed)
        let plain = quota.check(account: .user("a"), isMaster: false)
        // a has now used 4 of 10 per-minute requests (the refused one took none); the month is looser.
        #expect(plain.rateLimit == RateLimitStatus(scope: .perMinute, limit: 10, remaining: 6, resetSeconds: 30))
        #expect(quota.monthUnits(now: clock.nowMillis()) == 5)
    }

    @Test func refusalGivesBackEarlierSlotsAndRetryAfterCoversTheLongestLimit() {
        let clock = ManualClock(millis: ms("2026-11-30T23:00:00.000Z"))
        let quota = Quota(config: QuotaConfig(monthlyRequests: 3, perMinute: 2), clock: clock)
        #expect(quota.check(account: .user("a"), isMaster: false).allowed)
        #expect(quota.check(account: .user("a"), isMaster: false).allowed)
        // Per-minute refuses; the month unit it took is given back.
        let r1 = quota.check(account: .user("a"), isMaster: false)
        #expect(!r1.allowed && r1.rateLimit?.scope == .perMinute && r1.retryAfterSeconds == 60)
        #expect(quota.monthUnits(now: clock.nowMillis()) == 2)
        #expect(quota.check(account: .user("b"), isMaster: false).allowed)
        // Now both the month and a's minute are exhausted: wait for the longer one (the month).
        let r2 = quota.check(account: .user("a"), isMaster: false)
        #expect(!r2.allowed && r2.rateLimit?.scope == .monthly && r2.retryAfterSeconds == 3600)
    }

    @Test func refundUndoesACheck() {
        let clock = ManualClock(millis: novemberEvening)
        let quota = Quota(config: QuotaConfig(monthlyRequests: 1, perMinute: 1), clock: clock)
        let d = quota.check(account: .user("a"), function: .function("f", perMinute: 1), isMaster: false)
        #expect(d.allowed)
        quota.refund(d)  // e.g. answered 159 as a retry
        #expect(quota.monthUnits(now: clock.nowMillis()) == 0)
        #expect(quota.windowCount("user:a", now: clock.nowMillis()) == 0)
        #expect(quota.windowCount("function:f|user:a", now: clock.nowMillis()) == 0)
        #expect(quota.check(account: .user("a"), function: .function("f", perMinute: 1), isMaster: false).allowed)
        let refused = quota.check(account: .user("a"), isMaster: false)
        quota.refund(refused)  // no-op
        #expect(quota.monthUnits(now: clock.nowMillis()) == 1)
    }

    @Test func appAccountHasNoPerMinuteWindow() {
        let quota = Quota(config: QuotaConfig(perMinute: 1), clock: ManualClock(millis: novemberEvening))
        for _ in 0..<5 {
            let d = quota.check(account: .app, isMaster: false)
            #expect(d.allowed && d.rateLimit == nil)
        }
    }

    @Test func exactMonthlyLimitUnderConcurrency() {
        let quota = Quota(config: QuotaConfig(monthlyRequests: 5_000, perMinute: 0), clock: ManualClock(millis: novemberEvening))
        let allowed = Counter()
        onThreads(8) { t in
            var mine = 0
            for _ in 0..<1_000 where quota.check(account: .user("u\(t)"), isMaster: false).allowed { mine += 1 }
            allowed.add(mine)
        }
        #expect(allowed.value == 5_000)
        #expect(quota.monthUnits(now: novemberEvening) == 5_000)
    }

    @Test func exactPerMinuteLimitUnderConcurrency() {
        let quota = Quota(config: QuotaConfig(perMinute: 700), clock: ManualClock(millis: novemberEvening))
        let allowed = Counter()
        onThreads(8) { _ in
            var mine = 0
            for _ in 0..<200 where quota.check(account: .ip("198.51.100.9"), isMaster: false).allowed { mine += 1 }
            allowed.add(mine)
        }
        #expect(allowed.value == 700)
    }
}

/// A thread-safe tally for tests.
final class Counter: Sendable {
    private let total = Synchronization.Atomic<Int>(0)
    func add(_ n: Int) { total.add(n, ordering: .relaxed) }
    var value: Int { total.load(ordering: .relaxed) }
}

import Synchronization

@Suite("Quota limits: clock steps")
struct QuotaClockStepTests {
    @Test func aClockSteppedBackDoesNotRefuseOrReset() {
        let clock = ManualClock(millis: ms("2026-12-01T00:00:30.000Z"))
        let quota = Quota(config: QuotaConfig(monthlyRequests: 10, perMinute: 5), clock: clock)
        for _ in 0..<3 { #expect(quota.check(account: .user("a"), isMaster: false).allowed) }
        clock.set(ms("2026-11-30T23:59:50.000Z"))  // NTP step back across both boundaries
        for _ in 0..<2 { #expect(quota.check(account: .user("a"), isMaster: false).allowed) }
        #expect(!quota.check(account: .user("a"), isMaster: false).allowed)  // still the same 5-per-minute window
        clock.set(ms("2026-12-01T00:00:40.000Z"))
        #expect(quota.monthUnits(now: clock.nowMillis()) == 5)
    }
}
