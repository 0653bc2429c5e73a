import Foundation
import MoonbaseCore
import MoonbaseQuota
import MoonbaseSQLite
import Testing

@testable import MoonbaseStore

/// The store's usage tables against the quota's in-memory report (`UsageReport.aggregate`):
/// what a flush writes, a report reads back with the same grouping and order, and a restart
/// loads the same totals.
@Suite(.timeLimit(.minutes(1)))
struct UsageStoreTests {
    static func ms(_ iso: String) -> Int64 { ISO8601.parse(iso)! }

    /// Rows over three hours in November and one in December: the app's totals, two accounts,
    /// and function, route and class keys.
    static func sampleRows() -> [UsageRow] {
        func row(_ iso: String, _ kind: UsageKind, _ key: String, units: Int64, refused: Int64 = 0, lua: Int64 = 0) -> UsageRow {
            UsageRow(bucket: UsageBucket(kind: kind, key: key, hour: ms(iso)),
                     counts: UsageCounts(units: units, refused: refused, dbReads: 2 * units, dbWrites: units, luaCpuMicros: lua,
                                         wallMicros: 1_500 * units, bytesIn: 10 * units, bytesOut: 300 * units, events: units % 2))
        }
        return [
            row("2026-11-30T21:00:00Z", .account, "app", units: 4, lua: 2_100),
            row("2026-11-30T21:00:00Z", .account, "user:alice", units: 3, lua: 2_100),
            row("2026-11-30T21:00:00Z", .account, "ip:10.0.0.1", units: 1),
            row("2026-11-30T21:00:00Z", .function, "function:stats", units: 3, lua: 2_100),
            row("2026-11-30T21:00:00Z", .function, "class:Post", units: 1),
            row("2026-11-30T22:00:00Z", .account, "app", units: 1, refused: 1),
            row("2026-11-30T22:00:00Z", .account, "user:bob", units: 1, refused: 1),
            row("2026-11-30T22:00:00Z", .function, "route:GET /hello", units: 1, refused: 1),
            row("2026-11-30T23:00:00Z", .account, "app", units: 1),
            row("2026-11-30T23:00:00Z", .account, "user:alice", units: 1),
            row("2026-11-30T23:00:00Z", .function, "class:Post", units: 1),
            row("2026-12-01T00:00:00Z", .account, "app", units: 2, lua: 1_250),
            row("2026-12-01T00:00:00Z", .account, "user:alice", units: 1, lua: 1_250),
            row("2026-12-01T00:00:00Z", .function, "function:stats", units: 1, lua: 1_250),
            row("2026-12-01T00:00:00Z", .function, "job:cleanup", units: 1),
        ]
    }

    @Test func storedReportsAgreeWithTheInMemoryReport() throws {
        let f = try StorageFixture()
        let store: any UsageStore = f.store
        let rows = Self.sampleRows()
        let minute = Self.ms("2026-12-01T00:10:00Z")
        // Written in two batches (half the counts each) to exercise the additive upsert.
        for pass in 0..<2 {
            func half(_ v: Int64) -> Int64 { pass == 0 ? v / 2 : v - v / 2 }
            let halves = rows.map { r in
                let c = r.counts
                return UsageRow(bucket: r.bucket, counts: UsageCounts(
                    units: half(c.units), refused: half(c.refused), dbReads: half(c.dbReads), dbWrites: half(c.dbWrites),
                    luaCpuMicros: half(c.luaCpuMicros), wallMicros: half(c.wallMicros), bytesIn: half(c.bytesIn),
                    bytesOut: half(c.bytesOut), events: half(c.events)))
            }
            try store.write(UsageBatch(rows: halves, windows: [
                WindowCount(key: "user:alice", minute: minute, count: Int64(pass + 1)),
                WindowCount(key: "ip:old", minute: minute - 60_000, count: 9),
            ], pruneWindowsBefore: pass == 0 ? 0 : minute))
        }
        let range = (from: Self.ms("2026-11-30T22:00:00Z"), to: Self.ms("2027-01-01T00:00:00Z"))
        for g in UsageGrouping.allCases {
            let expected = UsageReport.aggregate(rows, from: range.from, to: range.to, by: g).rows
            let got = try store.usageReport(from: range.from, to: range.to, by: g).rows
            #expect(got == expected, "by=\(g.rawValue)")
            #expect(!got.isEmpty)
        }
        // One series instead of the app's totals.
        let alice = try store.usageReport(from: range.from, to: range.to, by: .hour, series: (.account, "user:alice")).rows
        #expect(alice.map(\.units) == [1, 1])
        let snapshot = try store.loadTotals(monthStart: Self.ms("2026-11-01T00:00:00Z"), monthEnd: Self.ms("2026-12-01T00:00:00Z"),
                                            minute: minute)
        #expect(snapshot.appMonthUnits == 6)
        #expect(snapshot.windows == [WindowCount(key: "user:alice", minute: minute, count: 2)])
        let windows = try f.database.read { (c) throws(ParseError) in try c.scalar("SELECT count(*) FROM _mb_usage_window") }
        #expect(windows == .integer(1), "the stale window was pruned")
    }
}
