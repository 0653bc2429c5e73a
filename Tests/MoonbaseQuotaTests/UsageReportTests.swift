import Foundation
import MoonbaseCore
import Testing

@testable import MoonbaseQuota

@Suite("Usage reports: grouping and ranges")
struct UsageReportTests {
    /// Usage over three hours in November and one in December, through a real `Quota`.
    static func sampleRows() -> [UsageRow] {
        let clock = ManualClock(millis: ms("2026-11-30T21:10:00.000Z"))
        let quota = Quota(clock: clock)
        func hit(_ a: Account?, _ t: UsageTarget?, refused: Bool = false, lua: Int64 = 0) {
            quota.record(RequestUsage(account: a, target: t, refused: refused, dbReads: 2, dbWrites: 1,
                                      luaCpuMicros: lua, wallMicros: 1_500, bytesIn: 10, bytesOut: 300))
        }
        for _ in 0..<3 { hit(.user("alice"), .function("stats"), lua: 700) }
        hit(.ip("10.0.0.1"), .class("Post"))
        clock.advance(byMillis: UTCCalendar.hourMillis)
        hit(.user("bob"), .route(method: "GET", pattern: "/hello"))
        hit(.user("bob"), .route(method: "GET", pattern: "/hello"), refused: true)
        clock.advance(byMillis: UTCCalendar.hourMillis)  // 2026-11-30T23:10
        hit(.user("alice"), .class("Post"))
        clock.advance(byMillis: UTCCalendar.hourMillis)  // 2026-12-01T00:10
        hit(.user("alice"), .function("stats"), lua: 1_250)
        hit(nil, .job("cleanup"))
        return quota.drainBatch(now: clock.nowMillis()).rows
    }

    @Test func byAccountPutsAppFirst() {
        let r = UsageReport.aggregate(Self.sampleRows(), from: ms("2026-11-01T00:00:00Z"), to: ms("2026-12-01T00:00:00Z"), by: .account)
        // Ties on units go by key.
        #expect(r.rows.map(\.key) == ["app", "user:alice", "ip:10.0.0.1", "user:bob"])
        let app = r.rows[0]
        #expect(app.units == 6 && app.refused == 1 && app.dbReads == 14 && app.luaCpuMs == 2.1 && app.wallMs == 10.5)
        #expect(r.rows[3].units == 1 && r.rows[3].refused == 1)
    }

    @Test func byFunctionHourAndMonth() {
        let rows = Self.sampleRows()
        let all = (from: ms("2026-11-01T00:00:00Z"), to: ms("2027-01-01T00:00:00Z"))
        let f = UsageReport.aggregate(rows, from: all.from, to: all.to, by: .function)
        #expect(f.rows.map(\.key) == ["function:stats", "class:Post", "job:cleanup", "route:GET /hello"])
        #expect(f.rows[0].units == 4 && f.rows[0].luaCpuMs == 3.35)
        let h = UsageReport.aggregate(rows, from: all.from, to: all.to, by: .hour)
        #expect(h.rows.map(\.key) == ["2026-11-30T21:00:00.000Z", "2026-11-30T22:00:00.000Z",
                                      "2026-11-30T23:00:00.000Z", "2026-12-01T00:00:00.000Z"])
        #expect(h.rows.map(\.units) == [4, 1, 1, 2])
        let d = UsageReport.aggregate(rows, from: all.from, to: all.to, by: .day)
        #expect(d.rows.map(\.key) == ["2026-11-30T00:00:00.000Z", "2026-12-01T00:00:00.000Z"])
        #expect(d.rows.map(\.units) == [6, 2])
        let m = UsageReport.aggregate(rows, from: all.from, to: all.to, by: .month)
        #expect(m.rows.map(\.key) == ["2026-11-01T00:00:00.000Z", "2026-12-01T00:00:00.000Z"])
        #expect(m.rows.map(\.units) == [6, 2])
    }

    @Test func rangesAlignToHoursAndDefaultToTheMonth() throws {
        let now = ms("2026-11-29T20:23:45.678Z")
        let d = try #require(UsageReport.range(from: nil, to: "", now: now))
        #expect(d.from == ms("2026-11-01T00:00:00Z") && d.to == ms("2026-12-01T00:00:00Z"))
        let r = try #require(UsageReport.range(from: "2026-11-30T21:30:00Z", to: "2026-11-30T22:00:01Z", now: now))
        #expect(r.from == ms("2026-11-30T21:00:00Z") && r.to == ms("2026-11-30T23:00:00Z"))
        #expect(UsageReport.range(from: "2026-11-30", to: "2026-11-29", now: now) == nil)
        #expect(UsageReport.range(from: "yesterday", to: nil, now: now) == nil)
        #expect(UsageGrouping(query: nil) == .account && UsageGrouping(query: "hour") == .hour && UsageGrouping(query: "day") == .day && UsageGrouping(query: "week") == nil)
        let rows = Self.sampleRows()
        let one = UsageReport.aggregate(rows, from: r.from, to: r.to, by: .hour)
        #expect(one.rows.map(\.key) == ["2026-11-30T21:00:00.000Z", "2026-11-30T22:00:00.000Z"])
    }
}
