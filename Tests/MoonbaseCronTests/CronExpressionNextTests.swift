import Foundation
import MoonbaseCore
import Testing
@testable import MoonbaseCron

@Suite("CronExpression.nextDate")
struct CronExpressionNextTests {
    /// (expression, zone, start, the next three times) — values checked against croniter 7.0.0.
    static let table: [(String, String, String, [String])] = [
        ("*/5 * * * *", "UTC", "2026-11-29T20:23:45.678Z",
         ["2026-11-29T20:25:00.000Z", "2026-11-29T20:30:00.000Z", "2026-11-29T20:35:00.000Z"]),
        ("* * * * *", "UTC", "2026-11-29T20:23:00.000Z",
         ["2026-11-29T20:24:00.000Z", "2026-11-29T20:25:00.000Z", "2026-11-29T20:26:00.000Z"]),
        // Spring forward, New York: a fixed time in the gap fires at 03:00; `*` hours skip it.
        ("30 2 * * *", "America/New_York", "2024-03-09T17:00:00.000Z",
         ["2024-03-10T07:00:00.000Z", "2024-03-11T06:30:00.000Z", "2024-03-12T06:30:00.000Z"]),
        ("30 * * * *", "America/New_York", "2024-03-10T06:00:00.000Z",
         ["2024-03-10T06:30:00.000Z", "2024-03-10T07:30:00.000Z", "2024-03-10T08:30:00.000Z"]),
        // Fall back, New York: 01:30 fires on both sides of the repeated hour.
        ("30 1 * * *", "America/New_York", "2024-11-02T16:00:00.000Z",
         ["2024-11-03T05:30:00.000Z", "2024-11-03T06:30:00.000Z", "2024-11-04T06:30:00.000Z"]),
        ("0 * * * *", "America/New_York", "2024-11-03T04:30:00.000Z",
         ["2024-11-03T05:00:00.000Z", "2024-11-03T06:00:00.000Z", "2024-11-03T07:00:00.000Z"]),
        ("30 2 * * *", "Europe/Berlin", "2024-03-30T11:00:00.000Z",
         ["2024-03-31T01:00:00.000Z", "2024-04-01T00:30:00.000Z", "2024-04-02T00:30:00.000Z"]),
        ("30 2 * * *", "Europe/Berlin", "2024-10-26T10:00:00.000Z",
         ["2024-10-27T00:30:00.000Z", "2024-10-27T01:30:00.000Z", "2024-10-28T01:30:00.000Z"]),
        // Lord Howe moves its clocks by 30 minutes.
        ("15 2 * * *", "Australia/Lord_Howe", "2024-04-06T01:00:00.000Z",
         ["2024-04-06T15:45:00.000Z", "2024-04-07T15:45:00.000Z", "2024-04-08T15:45:00.000Z"]),
        ("*/20 1 * * *", "Australia/Lord_Howe", "2024-04-06T13:00:00.000Z",
         ["2024-04-06T14:00:00.000Z", "2024-04-06T14:20:00.000Z", "2024-04-06T14:40:00.000Z"]),
        ("15 2 * * *", "Australia/Lord_Howe", "2024-10-05T01:30:00.000Z",
         ["2024-10-05T15:30:00.000Z", "2024-10-06T15:15:00.000Z", "2024-10-07T15:15:00.000Z"]),
        // Day-of-month OR day-of-week, including a `*/2` field (Vixie cron would AND here).
        ("0 0 */2 * mon", "UTC", "2024-01-01T00:00:00.000Z",
         ["2024-01-03T00:00:00.000Z", "2024-01-05T00:00:00.000Z", "2024-01-07T00:00:00.000Z"]),
        ("0 12 1 * fri", "UTC", "2024-03-01T13:00:00.000Z",
         ["2024-03-08T12:00:00.000Z", "2024-03-15T12:00:00.000Z", "2024-03-22T12:00:00.000Z"]),
        ("0 0 29 2 *", "UTC", "2024-03-01T00:00:00.000Z",
         ["2028-02-29T00:00:00.000Z", "2032-02-29T00:00:00.000Z", "2036-02-29T00:00:00.000Z"]),
    ]

    @Test("next three times", arguments: table)
    func nextThree(_ c: (String, String, String, [String])) throws {
        let e = try CronExpression(parsing: c.0)
        let zone = try #require(TimeZone(identifier: c.1))
        let start = try #require(ISO8601.parse(c.2))
        let got = e.nextDates(after: start, count: 3, in: zone).map { ISO8601.format(millis: $0) }
        #expect(got == c.3)
    }

    @Test func impossibleDateHasNoNextTime() throws {
        let e = try CronExpression(parsing: "0 0 31 2 *")
        #expect(e.nextDate(after: 1_700_000_000_000, in: TimeZone(identifier: "UTC")!) == nil)
        #expect(e.nextDates(after: 1_700_000_000_000, count: 3, in: TimeZone(identifier: "UTC")!).isEmpty)
    }

    @Test func nextIsStrictlyLater() throws {
        let e = try CronExpression(parsing: "0 * * * *")
        let t = try #require(ISO8601.parse("2026-01-01T10:00:00.000Z"))
        #expect(e.nextDate(after: t, in: TimeZone(identifier: "UTC")!) == t + 3_600_000)
    }

    /// Not a timed assertion: prints the cost so the differential test's budget can be judged.
    @Test func measuresCost() throws {
        let e = try CronExpression(parsing: "*/7 1-20/3 */2 * mon-fri")
        let zone = try #require(TimeZone(identifier: "America/New_York"))
        var t: Int64 = 1_700_000_000_000
        let n = 2000
        let begin = monotonicNanos()
        for _ in 0..<n { t = try #require(e.nextDate(after: t, in: zone)) }
        let perCall = Double(monotonicNanos() - begin) / Double(n) / 1000
        print("nextDate: \(String(format: "%.1f", perCall)) µs per call (debug build, New York, OR'ed days)")
        #expect(t > 1_700_000_000_000)
    }
}
