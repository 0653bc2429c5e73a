/// The SQLite schema and statements for usage, for the host to execute (MoonbaseQuota is a leaf
/// and cannot import SQLite). Parameters are positional (`?1`…); types are noted per statement.
///
/// Storage: one row per (kind, key, UTC hour) with summed counts. Monthly figures are sums of the
/// month's hourly rows (`loadMonthUnits`, `report(by: .month)`), so nothing is stored twice.
/// The tables use the internal `_mb_` prefix (no class can be named so).
///
/// A sink's `write(batch)`:
/// ```
/// BEGIN IMMEDIATE
///   for row in batch.rows:       upsertUsage(row.hour, row.kind.rawValue, row.key, counts…)
///   for w in batch.windows:      upsertWindow(w.key, w.minute, w.count)
///   pruneWindows(batch.pruneWindowsBefore)
/// COMMIT            (ROLLBACK and rethrow on any error)
/// ```
/// `loadTotals(monthStart:monthEnd:minute:)` = `loadMonthUnits(monthStart, monthEnd)` and
/// `loadWindows(minute)`. `GET /admin/usage` = `report(by:)` with `UsageReport.range(from:to:now:)`.
public enum UsageSQL {
    /// Creates the tables (idempotent; run with the host's migrations).
    public static let createTables: [String] = [
        """
        CREATE TABLE IF NOT EXISTS _mb_usage (
          hour INTEGER NOT NULL,            -- ms since the epoch, start of the UTC hour
          kind TEXT NOT NULL,               -- 'account' | 'function'
          key TEXT NOT NULL,                -- 'app', 'user:ID', 'ip:ADDR' | 'function:NAME', 'route:GET /p', 'class:Post'…
          units INTEGER NOT NULL DEFAULT 0,
          refused INTEGER NOT NULL DEFAULT 0,
          db_reads INTEGER NOT NULL DEFAULT 0,
          db_writes INTEGER NOT NULL DEFAULT 0,
          lua_cpu_us INTEGER NOT NULL DEFAULT 0,
          wall_us INTEGER NOT NULL DEFAULT 0,
          bytes_in INTEGER NOT NULL DEFAULT 0,
          bytes_out INTEGER NOT NULL DEFAULT 0,
          events INTEGER NOT NULL DEFAULT 0,
          PRIMARY KEY (kind, key, hour)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX IF NOT EXISTS _mb_usage_by_hour ON _mb_usage (kind, hour)",
        """
        CREATE TABLE IF NOT EXISTS _mb_usage_window (
          key TEXT PRIMARY KEY,             -- 'user:ID', 'ip:ADDR', 'function:NAME|user:ID'
          minute INTEGER NOT NULL,          -- ms since the epoch, start of the UTC minute
          count INTEGER NOT NULL
        ) WITHOUT ROWID
        """,
    ]

    /// Adds one row's deltas. ?1 hour, ?2 kind, ?3 key, ?4 units, ?5 refused, ?6 db_reads,
    /// ?7 db_writes, ?8 lua_cpu_us, ?9 wall_us, ?10 bytes_in, ?11 bytes_out, ?12 events (all integers but kind/key).
    public static let upsertUsage = """
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

    /// Adds `events` to a usage table created before it existed (errors when present: ignore).
    public static let addEventsColumn = "ALTER TABLE _mb_usage ADD COLUMN events INTEGER NOT NULL DEFAULT 0"

    /// Replaces one window's count. ?1 key, ?2 minute, ?3 count.
    public static let upsertWindow = """
        INSERT INTO _mb_usage_window (key, minute, count) VALUES (?1, ?2, ?3)
        ON CONFLICT (key) DO UPDATE SET minute = excluded.minute, count = excluded.count
        """

    /// Deletes windows of earlier minutes. ?1 minute.
    public static let pruneWindows = "DELETE FROM _mb_usage_window WHERE minute < ?1"

    /// The app's units in [?1, ?2) (ms). One row, one integer column.
    public static let loadMonthUnits = """
        SELECT COALESCE(SUM(units), 0) FROM _mb_usage
        WHERE kind = 'account' AND key = 'app' AND hour >= ?1 AND hour < ?2
        """

    /// The windows of minute ?1. Rows of (key TEXT, count INTEGER).
    public static let loadWindows = "SELECT key, count FROM _mb_usage_window WHERE minute = ?1"

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
    public static func report(by grouping: UsageGrouping, series: Bool = false) -> String {
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
