import MoonbaseCore
import MoonbasePostgres
import MoonbaseQuota

/// Usage in `_mb_usage` and `_mb_usage_window` (made by `PostgresMigrator`), the same rows as on
/// SQLite. Several hosts flush into the same rows: each flush adds its deltas with
/// `INSERT … ON CONFLICT DO UPDATE SET units = _mb_usage.units + excluded.units`, which
/// PostgreSQL applies atomically under the row's lock, so no host's counts are lost. The flush
/// runs READ COMMITTED (an upsert needs no snapshot of its own), its rows in key order so two
/// hosts' flushes lock rows in the same order; a deadlock that still happens is retried by the
/// pool like a serialization failure.
extension PostgresStore: UsageStore {
    public func write(_ batch: UsageBatch) throws {
        try pool.transaction(isolation: .readCommitted) { (tx) throws(ParseError) in try write(batch, on: tx.connection) }
    }

    /// The flush and, after it, the month's shared total and the minute's windows: the hosts'
    /// flushes are the only writers of these rows, so the sums are every request any host
    /// flushed, this one's included.
    public func writeReadingShared(_ batch: UsageBatch, monthStart: Int64, monthEnd: Int64, minute: Int64) throws -> SharedUsage? {
        try pool.transaction(isolation: .readCommitted) { (tx) throws(ParseError) -> SharedUsage in
            if !batch.isEmpty { try write(batch, on: tx.connection) }
            let units = try Self.appUnits(monthStart: monthStart, monthEnd: monthEnd, on: tx.connection)
            var windows: [String: Int64] = [:]
            for r in try tx.connection.execute(PostgresUsageSQL.windowTotals, [.integer(minute)]).rows {
                if let key = r[0].string { windows[key] = r[1].int64 ?? 0 }
            }
            return SharedUsage(appMonthUnits: units, windows: windows)
        }
    }

    static func appUnits(monthStart: Int64, monthEnd: Int64, on c: PGConnection) throws(ParseError) -> Int64 {
        try c.execute("""
            SELECT coalesce(sum(units), 0)::int8 FROM _mb_usage
            WHERE kind = 'account' AND key = 'app' AND hour >= $1 AND hour < $2
            """, [.integer(monthStart), .integer(monthEnd)]).scalar?.int64 ?? 0
    }

    private func write(_ batch: UsageBatch, on c: PGConnection) throws(ParseError) {
        let rows = batch.rows.sorted { ($0.kind.rawValue, $0.key, $0.hour) < ($1.kind.rawValue, $1.key, $1.hour) }
        for r in rows {
            let k = r.counts
            try c.execute(PostgresUsageSQL.upsertUsage, [
                .integer(r.hour), .text(r.kind.rawValue), .text(r.key), .integer(k.units), .integer(k.refused),
                .integer(k.dbReads), .integer(k.dbWrites), .integer(k.luaCpuMicros), .integer(k.wallMicros),
                .integer(k.bytesIn), .integer(k.bytesOut), .integer(k.events),
            ])
        }
        for w in batch.windows {
            try c.execute(PostgresUsageSQL.upsertWindow, [.text(w.key), .integer(w.minute), .text(usageHost), .integer(w.own)])
        }
        try c.execute("DELETE FROM _mb_usage_window WHERE minute < $1", [.integer(batch.pruneWindowsBefore)])
    }

    public func loadTotals(monthStart: Int64, monthEnd: Int64, minute: Int64) throws -> UsageSnapshot {
        try pool.withConnection { (c) throws(ParseError) -> UsageSnapshot in
            let units = try Self.appUnits(monthStart: monthStart, monthEnd: monthEnd, on: c)
            let windows = try c.execute(PostgresUsageSQL.windowTotals, [.integer(minute)]).rows.map { r in
                WindowCount(key: r[0].string ?? "", minute: minute, count: r[1].int64 ?? 0)
            }
            return UsageSnapshot(appMonthUnits: units, windows: windows)
        }
    }

    public func usageReport(from: Int64, to: Int64, by: UsageGrouping,
                            series: (kind: UsageKind, key: String)?) throws(ParseError) -> UsageReport {
        var binds: [PGValue] = [.integer(from), .integer(to)]
        if let series { binds += [.text(series.kind.rawValue), .text(series.key)] }
        let result = try pool.withConnection { (c) throws(ParseError) in
            try c.execute(PostgresUsageSQL.report(by: by, series: series != nil), binds)
        }
        let rows = result.rows.map { r in
            UsageReportRow(key: r[0].string ?? "", units: r[1].int64 ?? 0, refused: r[2].int64 ?? 0,
                           dbReads: r[3].int64 ?? 0, dbWrites: r[4].int64 ?? 0, luaCpuMs: r[5].double,
                           wallMs: r[6].double, bytesIn: r[7].int64 ?? 0, bytesOut: r[8].int64 ?? 0,
                           events: r[9].int64 ?? 0)
        }
        return UsageReport(from: from, to: to, by: by, rows: rows)
    }
}

extension PGValue {
    /// A `float8` column's value (0 for anything else).
    fileprivate var double: Double {
        if case .real(let d) = self { return d }
        if case .integer(let n) = self { return Double(n) }
        return 0
    }
}

/// The usage statements in PostgreSQL's spelling (the SQLite ones are `UsageSQL`): the same
/// rows, groupings and order. Sums are cast back to `int8`/`float8` (PostgreSQL sums `bigint`
/// into `numeric`); keys sort in byte order as on SQLite.
enum PostgresUsageSQL {
    /// Adds one row's deltas. $1 hour, $2 kind, $3 key, $4 units, $5 refused, $6 db_reads,
    /// $7 db_writes, $8 lua_cpu_us, $9 wall_us, $10 bytes_in, $11 bytes_out, $12 events.
    static let upsertUsage = """
        INSERT INTO _mb_usage (hour, kind, key, units, refused, db_reads, db_writes, lua_cpu_us, wall_us, bytes_in, bytes_out, events)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
        ON CONFLICT (kind, key, hour) DO UPDATE SET
          units = _mb_usage.units + excluded.units,
          refused = _mb_usage.refused + excluded.refused,
          db_reads = _mb_usage.db_reads + excluded.db_reads,
          db_writes = _mb_usage.db_writes + excluded.db_writes,
          lua_cpu_us = _mb_usage.lua_cpu_us + excluded.lua_cpu_us,
          wall_us = _mb_usage.wall_us + excluded.wall_us,
          bytes_in = _mb_usage.bytes_in + excluded.bytes_in,
          bytes_out = _mb_usage.bytes_out + excluded.bytes_out,
          events = _mb_usage.events + excluded.events
        """

    /// Replaces this host's part of one window. $1 key, $2 minute, $3 host, $4 count.
    static let upsertWindow = """
        INSERT INTO _mb_usage_window (key, minute, host, count) VALUES ($1, $2, $3, $4)
        ON CONFLICT (key, minute, host) DO UPDATE SET count = excluded.count
        """

    /// The windows of a minute, each the sum of the hosts' parts. $1 minute.
    static let windowTotals = """
        SELECT key, sum(count)::int8 FROM _mb_usage_window WHERE minute = $1 GROUP BY key ORDER BY key COLLATE "C"
        """

    static let sums = """
        sum(units)::int8, sum(refused)::int8, sum(db_reads)::int8, sum(db_writes)::int8, \
        (sum(lua_cpu_us) / 1000.0)::float8, (sum(wall_us) / 1000.0)::float8, sum(bytes_in)::int8, \
        sum(bytes_out)::int8, sum(events)::int8
        """

    /// The ISO-8601 start of the UTC hour, day or month holding `hour` (ms).
    static func start(_ format: String) -> String {
        "to_char(to_timestamp(hour / 1000) AT TIME ZONE 'UTC', '\(format)')"
    }

    /// The report query of a grouping; `UsageSQL.report` documents the rows. $1 from, $2 to;
    /// with `series`, $3 kind and $4 key.
    static func report(by grouping: UsageGrouping, series: Bool = false) -> String {
        let subject = series ? "kind = $3 AND key = $4" : "kind = 'account' AND key = 'app'"
        switch grouping {
        case .account:
            return """
                SELECT key, \(sums) FROM _mb_usage
                WHERE kind = 'account' AND hour >= $1 AND hour < $2
                GROUP BY key ORDER BY key <> 'app', sum(units) DESC, key COLLATE "C"
                """
        case .function:
            return """
                SELECT key, \(sums) FROM _mb_usage
                WHERE kind = 'function' AND hour >= $1 AND hour < $2
                GROUP BY key ORDER BY sum(units) DESC, key COLLATE "C"
                """
        case .hour:
            return """
                SELECT \(start(#"YYYY-MM-DD"T"HH24":00:00.000Z""#)), \(sums) FROM _mb_usage
                WHERE \(subject) AND hour >= $1 AND hour < $2
                GROUP BY hour ORDER BY hour
                """
        case .day:
            return """
                SELECT \(start(#"YYYY-MM-DD"T00:00:00.000Z""#)) AS day, \(sums) FROM _mb_usage
                WHERE \(subject) AND hour >= $1 AND hour < $2
                GROUP BY day ORDER BY day
                """
        case .month:
            return """
                SELECT \(start(#"YYYY-MM"-01T00:00:00.000Z""#)) AS month, \(sums) FROM _mb_usage
                WHERE \(subject) AND hour >= $1 AND hour < $2
                GROUP BY month ORDER BY month
                """
        }
    }
}
