import Foundation
import MoonbaseCore
import Testing

@testable import MoonbaseQuota

@Suite("Usage reports: grouping, ranges, and the SQL the host runs")
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

    static let sqlite3 = "/usr/bin/sqlite3"

    /// Runs the host's statements (`UsageSQL`) in the sqlite3 shell and checks every report
    /// grouping against `UsageReport.aggregate`, and the restart queries against the rows.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: sqlite3)), .timeLimit(.minutes(1)))
    func sqlAgreesWithTheInMemoryReport() throws {
        let rows = Self.sampleRows()
        // Written in two batches (half the counts each) to exercise the additive upsert.
        var script = ".bail on\n"
        for ddl in UsageSQL.createTables { script += ddl + ";\n" }
        for pass in 0..<2 {
            script += "BEGIN IMMEDIATE;\n"
            for row in rows {
                let c = row.counts
                func half(_ v: Int64) -> Int64 { pass == 0 ? v / 2 : v - v / 2 }
                let values: [String] = [String(row.hour), quote(row.kind.rawValue), quote(row.key)]
                    + [c.units, c.refused, c.dbReads, c.dbWrites, c.luaCpuMicros, c.wallMicros, c.bytesIn, c.bytesOut, c.events].map { String(half($0)) }
                script += ".param clear\n"
                for (i, v) in values.enumerated() { script += ".param set ?\(i + 1) \(v)\n" }
                script += UsageSQL.upsertUsage + ";\n"
            }
            let minute = ms("2026-12-01T00:10:00Z")
            for (key, count, m) in [("user:alice", Int64(pass + 1), minute), ("ip:old", 9, minute - 60_000)] {
                script += ".param clear\n.param set ?1 \(quote(key))\n.param set ?2 \(m)\n.param set ?3 \(count)\n"
                script += UsageSQL.upsertWindow + ";\n"
            }
            script += "COMMIT;\n"
        }
        script += ".param clear\n.param set ?1 \(ms("2026-12-01T00:10:00Z"))\n" + UsageSQL.pruneWindows + ";\n"
        script += ".mode list\n.separator \"\\t\"\n"
        let range = (from: ms("2026-11-30T22:00:00Z"), to: ms("2027-01-01T00:00:00Z"))
        for g in UsageGrouping.allCases {
            script += "SELECT '#\(g.rawValue)';\n.param clear\n.param set ?1 \(range.from)\n.param set ?2 \(range.to)\n"
            script += UsageSQL.report(by: g) + ";\n"
        }
        script += "SELECT '#month-units';\n.param set ?1 \(ms("2026-11-01T00:00:00Z"))\n.param set ?2 \(ms("2026-12-01T00:00:00Z"))\n"
        script += UsageSQL.loadMonthUnits + ";\n"
        script += "SELECT '#windows';\n.param clear\n.param set ?1 \(ms("2026-12-01T00:10:00Z"))\n" + UsageSQL.loadWindows + ";\n"
        script += "SELECT '#all-windows';\nSELECT count(*) FROM _mb_usage_window;\n"

        let output = try runSQLite(script)
        var sections: [String: [[String]]] = [:]
        var current = ""
        for line in output.split(separator: "\n", omittingEmptySubsequences: true) {
            if line.hasPrefix("#") { current = String(line.dropFirst()); sections[current] = []; continue }
            sections[current, default: []].append(line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init))
        }
        for g in UsageGrouping.allCases {
            let expected = UsageReport.aggregate(rows, from: range.from, to: range.to, by: g).rows
            let got = try (sections[g.rawValue] ?? []).map { f throws -> UsageReportRow in
                try #require(f.count == 10, "\(f)")
                return UsageReportRow(key: f[0], units: Int64(f[1])!, refused: Int64(f[2])!, dbReads: Int64(f[3])!,
                                      dbWrites: Int64(f[4])!, luaCpuMs: Double(f[5])!, wallMs: Double(f[6])!,
                                      bytesIn: Int64(f[7])!, bytesOut: Int64(f[8])!, events: Int64(f[9])!)
            }
            #expect(got == expected, "by=\(g.rawValue)")
            #expect(!got.isEmpty)
        }
        #expect(sections["month-units"] == [["6"]])
        #expect(sections["windows"] == [["user:alice", "2"]])
        #expect(sections["all-windows"] == [["1"]])
    }

    func quote(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "''") + "'" }

    func runSQLite(_ script: String) throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("usage-sql-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.sqlite3)
        p.arguments = [dir.appendingPathComponent("usage.sqlite").path]
        let input = Pipe(), out = Pipe(), err = Pipe()
        p.standardInput = input
        p.standardOutput = out
        p.standardError = err
        try p.run()
        input.fileHandleForWriting.write(Data(script.utf8))
        try input.fileHandleForWriting.close()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        let errors = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        try #require(p.terminationStatus == 0 && errors.isEmpty, "sqlite3: \(errors)")
        return String(decoding: data, as: UTF8.self)
    }
}
