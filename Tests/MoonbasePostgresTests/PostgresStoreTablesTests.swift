import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import MoonbaseQuota
import MoonbaseStore
import Testing

/// The PostgreSQL store's internal-table parts (Parse Config, file records, mail tokens, usage,
/// backup) on a real cluster, each test on a database of its own; where SQLite has the same
/// part, the two must answer alike.
extension PostgresSuite {
    @Suite struct PostgresStoreTablesTests {
        /// A `PostgresStore` on a new, empty database of the cluster.
        static func freshStore() throws -> PostgresStore {
            try PostgresStore(url: freshDatabaseURL())
        }

        @Test func configParametersRoundTripInOneTransaction() throws {
            let store = try Self.freshStore()
            let nested = JSONValue.object(["z": 1, "a": ["b", true, .null]])
            try store.updateConfig([.set("welcome", "hi"), .set("limits", nested), .set("zz", 1.5), .masterKeyOnly("limits", true)])
            try store.updateConfig([.set("welcome", "hello"), .remove("zz"), .masterKeyOnly("missing", true)])
            let params = try store.configParameters()
            #expect(params == [ConfigParameter(name: "limits", value: nested, masterKeyOnly: true),
                               ConfigParameter(name: "welcome", value: "hello", masterKeyOnly: false)])
            // An object value reads back with its keys in the order written.
            #expect(params[0].value.jsonString == #"{"z":1,"a":["b",true,null]}"#)
            // A failing change list changes nothing (one transaction).
            #expect(throws: ParseError.self) {
                try store.pool.transaction { (_) throws(ParseError) in
                    try store.updateConfig([.set("welcome", "lost")])
                    throw ParseError(.validationError, "abort")
                }
            }
            #expect(try store.configParameters().map(\.value) == [nested, "hello"])
            // Byte order, as SQLite sorts names.
            try store.updateConfig([.set("B", 1), .set("a", 2), .set("_x", 3)])
            #expect(try store.configParameters().map(\.name) == ["B", "_x", "a", "limits", "welcome"])
        }

        @Test func fileRecordsAreUniqueByName() throws {
            let store = try Self.freshStore()
            try store.recordFile(name: "abc_photo.png", contentType: "image/png", size: 12, createdAt: 1_000)
            #expect(try store.fileContentType("abc_photo.png") == "image/png")
            #expect(try store.fileContentType("other.png") == nil)
            let dup = #expect(throws: ParseError.self) {
                try store.recordFile(name: "abc_photo.png", contentType: "text/plain", size: 1, createdAt: 2_000)
            }
            #expect(dup?.code == .duplicateValue)
            #expect(try store.deleteFileRecord("abc_photo.png"))
            #expect(try !store.deleteFileRecord("abc_photo.png"))
            #expect(try store.fileContentType("abc_photo.png") == nil)
        }

        @Test func mailTokensAreSingleUseAndReplaceTheUsersEarlierOnes() throws {
            let store = try Self.freshStore()
            try store.saveMailToken(hash: "old", userId: "u1", kind: "passwordReset", email: "a@x.io", expiresAt: 5_000, now: 1_000)
            try store.saveMailToken(hash: "verify", userId: "u1", kind: "verifyEmail", email: "a@x.io", expiresAt: 5_000, now: 1_000)
            try store.saveMailToken(hash: "stale", userId: "u2", kind: "passwordReset", email: "b@x.io", expiresAt: 1_500, now: 1_000)
            // A new reset token of u1 replaces the old one; u2's expired one is swept.
            try store.saveMailToken(hash: "new", userId: "u1", kind: "passwordReset", email: "a@x.io", expiresAt: 9_000, now: 2_000)
            #expect(try store.mailTokenExpiry(hash: "old", kind: "passwordReset") == nil)
            #expect(try store.mailTokenExpiry(hash: "stale", kind: "passwordReset") == nil)
            #expect(try store.mailTokenExpiry(hash: "verify", kind: "verifyEmail") == 5_000)
            #expect(try store.mailTokenExpiry(hash: "new", kind: "passwordReset") == 9_000)
            // The wrong kind neither finds nor consumes it.
            #expect(try store.takeMailToken(hash: "new", kind: "verifyEmail") == nil)
            // Taken once, from many threads at once: exactly one caller gets it.
            let winners = Locked(0)
            let groups = (0..<6).map { _ in
                onThread {
                    if (try? store.takeMailToken(hash: "new", kind: "passwordReset")) == MailToken(userId: "u1", email: "a@x.io", expiresAt: 9_000) {
                        winners.update { $0 += 1 }
                    }
                }
            }
            for g in groups { g.wait() }
            #expect(winners.get == 1)
            #expect(try store.takeMailToken(hash: "new", kind: "passwordReset") == nil)
        }

        static func hour(_ iso: String) -> Int64 { ISO8601.parse(iso)! }

        /// Rows over two days and two months: the app, accounts, functions.
        static func sampleRows() -> [UsageRow] {
            func row(_ iso: String, _ kind: UsageKind, _ key: String, _ units: Int64, lua: Int64 = 0) -> UsageRow {
                UsageRow(bucket: UsageBucket(kind: kind, key: key, hour: hour(iso)),
                         counts: UsageCounts(units: units, refused: units / 3, dbReads: 2 * units, dbWrites: units,
                                             luaCpuMicros: lua, wallMicros: 1_500 * units, bytesIn: 10 * units,
                                             bytesOut: 300 * units, events: units % 2))
            }
            return [
                row("2026-11-30T21:00:00Z", .account, "app", 4, lua: 2_100),
                row("2026-11-30T21:00:00Z", .account, "user:alice", 3, lua: 2_100),
                row("2026-11-30T21:00:00Z", .account, "ip:10.0.0.1", 1),
                row("2026-11-30T21:00:00Z", .account, "Zed", 1),
                row("2026-11-30T21:00:00Z", .function, "function:stats", 3, lua: 2_100),
                row("2026-11-30T21:00:00Z", .function, "class:Post", 1),
                row("2026-11-30T22:00:00Z", .account, "app", 1),
                row("2026-11-30T22:00:00Z", .function, "route:GET /hello", 1),
                row("2026-12-01T00:00:00Z", .account, "app", 2, lua: 1_250),
                row("2026-12-01T00:00:00Z", .account, "user:alice", 1, lua: 1_250),
                row("2026-12-01T00:00:00Z", .function, "function:stats", 1, lua: 1_250),
            ]
        }

        @Test func usageReportsMatchSQLiteForEveryGrouping() throws {
            let pg = try Self.freshStore()
            let dir = NSTemporaryDirectory() + "mb-usage-\(UUID().uuidString.prefix(8))"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let lite = try SQLiteDocumentStore(path: dir + "/moonbase.sqlite")
            defer { lite.close() }
            let minute = Self.hour("2026-12-01T00:10:00Z")
            for sink in [pg as any UsageStore, lite as any UsageStore] {
                // Twice: the second flush adds to the first.
                for pass in 0..<2 {
                    try sink.write(UsageBatch(rows: Self.sampleRows(), windows: [
                        WindowCount(key: "user:alice", minute: minute, count: Int64(pass + 1)),
                        WindowCount(key: "ip:old", minute: minute - 60_000, count: 9),
                    ], pruneWindowsBefore: minute))
                }
            }
            let from = Self.hour("2026-11-01T00:00:00Z"), to = Self.hour("2027-01-01T00:00:00Z")
            for by in [UsageGrouping.account, .function, .hour, .day, .month] {
                let a = try pg.usageReport(from: from, to: to, by: by)
                let b = try lite.usageReport(from: from, to: to, by: by)
                #expect(a.rows == b.rows, "\(by)")
                #expect(!a.rows.isEmpty)
            }
            let series = try pg.usageReport(from: from, to: to, by: .day, series: (.account, "user:alice"))
            #expect(series.rows.map(\.key) == ["2026-11-30T00:00:00.000Z", "2026-12-01T00:00:00.000Z"])
            #expect(series.rows.map(\.units) == [6, 2])
            #expect(try pg.usageReport(from: from, to: to, by: .account).rows.first?.key == "app")
            let totals = try pg.loadTotals(monthStart: Self.hour("2026-12-01T00:00:00Z"), monthEnd: to, minute: minute)
            #expect(totals.appMonthUnits == 4)
            // The window was replaced, not added; the stale minute's was pruned.
            #expect(totals.windows == [WindowCount(key: "user:alice", minute: minute, count: 2)])
        }

        /// Two hosts flushing into the same rows at once lose no count.
        @Test func concurrentFlushesFromTwoHostsAddUp() throws {
            let url = try freshDatabaseURL()
            let hosts = try [PostgresStore(url: url), PostgresStore(url: url)]
            let h = Self.hour("2026-12-01T10:00:00Z")
            let failures = Locked(0)
            let groups = hosts.map { store in
                onThread {
                    for i in 0..<40 {
                        let rows = [UsageRow(bucket: UsageBucket(kind: .account, key: "app", hour: h), counts: UsageCounts(units: 1)),
                                    UsageRow(bucket: UsageBucket(kind: .account, key: "user:\(i % 3)", hour: h), counts: UsageCounts(units: 2)),
                                    UsageRow(bucket: UsageBucket(kind: .function, key: "function:f", hour: h), counts: UsageCounts(units: 1))]
                        do { try store.write(UsageBatch(rows: rows.shuffled(), windows: [], pruneWindowsBefore: 0)) } catch {
                            failures.update { $0 += 1 }
                        }
                    }
                }
            }
            for g in groups { g.wait() }
            #expect(failures.get == 0)
            let report = try hosts[0].usageReport(from: h, to: h + 3_600_000, by: .account)
            #expect(report.rows.first { $0.key == "app" }?.units == 80)
            #expect(report.rows.filter { $0.key.hasPrefix("user:") }.map(\.units).reduce(0, +) == 160)
            #expect(try hosts[1].usageReport(from: h, to: h + 3_600_000, by: .function).rows.map(\.units) == [80])
        }

        @Test func backupPointsToPgDumpAndWritesNothing() throws {
            let store = try Self.freshStore()
            let out = NSTemporaryDirectory() + "mb-backup-\(UUID().uuidString.prefix(8))"
            let e = #expect(throws: ParseError.self) { try store.backup(to: out) }
            #expect(e?.code == .commandUnavailable)
            #expect(e?.message.contains("pg_dump") == true)
            #expect(!FileManager.default.fileExists(atPath: out))
        }

        /// Every part of the store is implemented: the composition root can serve on it.
        @Test func isAWholeStore() throws {
            let store: Any = try Self.freshStore()
            #expect(store is any Store)
        }
    }
}

/// The URL of a new, empty database of the run's cluster.
func freshDatabaseURL() throws -> String {
    let name = uniqueTable("mbdb")
    let admin = try PGConnection(url: PGTestCluster.url)
    defer { admin.close() }
    try admin.executeScript("CREATE DATABASE \(name)")
    let base = PGTestCluster.url
    return String(base[..<base.lastIndex(of: "/")!]) + "/" + name
}
