import MoonbaseCore
import MoonbaseQuota
import MoonbaseSQLite

/// Usage in `_mb_usage` (one row per kind, key and UTC hour, summed counts; monthly figures are
/// sums of the month's hourly rows) and `_mb_usage_window` (per-minute rate windows), both made
/// by `Migrator`. One write transaction per flush.
extension SQLiteDocumentStore: UsageStore {
    public func write(_ batch: UsageBatch) throws {
        try database.write { (tx) throws(ParseError) in
            let c = tx.connection
            for r in batch.rows {
                let k = r.counts
                _ = try c.run(UsageSQL.upsertUsage, [
                    .integer(r.hour), .text(r.kind.rawValue), .text(r.key), .integer(k.units), .integer(k.refused),
                    .integer(k.dbReads), .integer(k.dbWrites), .integer(k.luaCpuMicros), .integer(k.wallMicros),
                    .integer(k.bytesIn), .integer(k.bytesOut), .integer(k.events),
                ])
            }
            for w in batch.windows {
                _ = try c.run(UsageSQL.upsertWindow, [.text(w.key), .integer(w.minute), .integer(w.count)])
            }
            _ = try c.run(UsageSQL.pruneWindows, [.integer(batch.pruneWindowsBefore)])
        }
    }

    public func loadTotals(monthStart: Int64, monthEnd: Int64, minute: Int64) throws -> UsageSnapshot {
        try database.read { (c) throws(ParseError) -> UsageSnapshot in
            var units: Int64 = 0
            if case .integer(let n)? = try c.scalar(UsageSQL.loadMonthUnits, [.integer(monthStart), .integer(monthEnd)]) { units = n }
            var windows: [WindowCount] = []
            try c.query(UsageSQL.loadWindows, [.integer(minute)]) { (s) throws(ParseError) in
                windows.append(WindowCount(key: s.text(0) ?? "", minute: minute, count: s.int64(1)))
            }
            return UsageSnapshot(appMonthUnits: units, windows: windows)
        }
    }

    public func usageReport(from: Int64, to: Int64, by: UsageGrouping,
                            series: (kind: UsageKind, key: String)?) throws(ParseError) -> UsageReport {
        try database.read { (c) throws(ParseError) -> UsageReport in
            var rows: [UsageReportRow] = []
            var binds: [SQLiteValue] = [.integer(from), .integer(to)]
            if let series { binds += [.text(series.kind.rawValue), .text(series.key)] }
            try c.query(UsageSQL.report(by: by, series: series != nil), binds) { (s) throws(ParseError) in
                rows.append(UsageReportRow(key: s.text(0) ?? "", units: s.int64(1), refused: s.int64(2),
                                           dbReads: s.int64(3), dbWrites: s.int64(4), luaCpuMs: s.double(5),
                                           wallMs: s.double(6), bytesIn: s.int64(7), bytesOut: s.int64(8),
                                           events: s.int64(9)))
            }
            return UsageReport(from: from, to: to, by: by, rows: rows)
        }
    }
}

/// The usage statements. Parameters are positional (`?1`…); types are noted per statement.
enum UsageSQL {
    /// Adds one row's deltas. ?1 hour, ?2 kind, ?3 key, ?4 units, ?5 refused, ?6 db_reads,
    /// ?7 db_writes, ?8 lua_cpu_us, ?9 wall_us, ?10 bytes_in, ?11 bytes_out, ?12 events (all integers but kind/key).
    static let upsertUsage = """
        INSERT INTO _mb_usage (hour, kind, key, units, refused, db_reads, db_writes, lua_cpu_us, wall_us, bytes_in, bytes_out, events)
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
        ON CONFLICT (kind, key, hour) DO UPDATE SET
          units = units + excluded.units,
          refused = refused + excluded.refused,
          db_reads = db_reads + excluded.db_reads,
          db_writes = db_writes + excluded.db_writes,
          lua_cpu_us = lua_cpu_us + excluded.lua_cpu_us,
          wall_us = wall_us + excluded.wall_us,
          bytes_in = bytes_in + excluded.bytes_in,
          bytes_out = bytes_out + excluded.bytes_out,
          events = events + excluded.events
        """

    /// Replaces one window's count. ?1 key, ?2 minute, ?3 count.
    static let upsertWindow = """
        INSERT INTO _mb_usage_window (key, minute, count) VALUES (?1, ?2, ?3)
        ON CONFLICT (key) DO UPDATE SET minute = excluded.minute, count = excluded.count
        """

    /// Deletes windows of earlier minutes. ?1 minute.
    static let pruneWindows = "DELETE FROM _mb_usage_window WHERE minute < ?1"

    /// The app's units in [?1, ?2) (ms). One row, one integer column.
    static let loadMonthUnits = """
        SELECT COALESCE(SUM(units), 0) FROM _mb_usage
        WHERE kind = 'account' AND key = 'app' AND hour >= ?1 AND hour < ?2
        """

    /// The windows of minute ?1. Rows of (key TEXT, count INTEGER).
    static let loadWindows = "SELECT key, count FROM _mb_usage_window WHERE minute = ?1"

    /// Columns every report query returns, in this order (`UsageReportRow`'s fields).
    static let sums = """
        SUM(units), SUM(refused), SUM(db_reads), SUM(db_writes), SUM(lua_cpu_us) / 1000.0, \
        SUM(wall_us) / 1000.0, SUM(bytes_in), SUM(bytes_out), SUM(events)
        """

    /// The report query for a grouping. ?1 from, ?2 to (ms, hour-aligned: see
    /// `UsageReport.range`). Each row: key TEXT, units, refused, dbReads, dbWrites (INTEGER),
    /// luaCpuMs, wallMs (REAL), bytesIn, bytesOut, events (INTEGER).
    ///
    /// - `account`: one row per account (`app` first: it holds every charged request), then by units.
    /// - `function`: one row per function/route/class key, by units.
    /// - `hour` / `day` / `month`: the app's totals per UTC hour / day / month, keyed by the ISO-8601 start
    ///   (`2026-11-29T20:00:00.000Z`), in time order.
    ///
    /// `series`: for the time groupings, one account's or one function's series instead of the
    /// app's totals (?3 kind, ?4 key).
    static func report(by grouping: UsageGrouping, series: Bool = false) -> String {
        let subject = series ? "kind = ?3 AND key = ?4" : "kind = 'account' AND key = 'app'"
        switch grouping {
        case .account:
            return """
                SELECT key, \(sums) FROM _mb_usage
                WHERE kind = 'account' AND hour >= ?1 AND hour < ?2
                GROUP BY key ORDER BY key <> 'app', SUM(units) DESC, key
                """
        case .function:
            return """
                SELECT key, \(sums) FROM _mb_usage
                WHERE kind = 'function' AND hour >= ?1 AND hour < ?2
                GROUP BY key ORDER BY SUM(units) DESC, key
                """
        case .hour:
            return """
                SELECT strftime('%Y-%m-%dT%H:00:00.000Z', hour / 1000, 'unixepoch'), \(sums) FROM _mb_usage
                WHERE \(subject) AND hour >= ?1 AND hour < ?2
                GROUP BY hour ORDER BY hour
                """
        case .day:
            return """
                SELECT strftime('%Y-%m-%dT00:00:00.000Z', hour / 1000, 'unixepoch') AS day, \(sums) FROM _mb_usage
                WHERE \(subject) AND hour >= ?1 AND hour < ?2
                GROUP BY day ORDER BY day
                """
        case .month:
            return """
                SELECT strftime('%Y-%m-01T00:00:00.000Z', hour / 1000, 'unixepoch') AS month, \(sums) FROM _mb_usage
                WHERE \(subject) AND hour >= ?1 AND hour < ?2
                GROUP BY month ORDER BY month
                """
        }
    }
}
