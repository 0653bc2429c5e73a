import MoonbaseCore
import MoonbaseJSON
import MoonbaseQuota
import MoonbaseSQLite

/// Usage rows in SQLite with `UsageSQL` (one transaction per flush).
public final class SQLiteUsageSink: UsageSink {
    let database: Database

    public init(database: Database) throws(ParseError) {
        self.database = database
        try database.write { (tx) throws(ParseError) in
            for sql in UsageSQL.createTables { try tx.connection.execute(sql) }
            if try tx.connection.scalar("SELECT 1 FROM pragma_table_info('_mb_usage') WHERE name = 'events'") == nil {
                try tx.connection.execute(UsageSQL.addEventsColumn)
            }
        }
    }

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

    /// `GET /admin/usage` and `moonbase usage`.
    /// `series` (time groupings only): one account's or function's rows instead of the app's.
    public func report(from: Int64, to: Int64, by: UsageGrouping,
                       series: (kind: UsageKind, key: String)? = nil) throws(ParseError) -> UsageReport {
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

    public static func json(_ r: UsageReport) -> JSONValue {
        .object([
            "from": .string(ISO8601.format(millis: r.from)), "to": .string(ISO8601.format(millis: r.to)),
            "by": .string(r.by.rawValue),
            "rows": .array(r.rows.map { row in
                .object([
                    "key": .string(row.key), "units": .int(row.units), "refused": .int(row.refused),
                    "dbReads": .int(row.dbReads), "dbWrites": .int(row.dbWrites),
                    "luaCpuMs": .double(row.luaCpuMs), "wallMs": .double(row.wallMs),
                    "bytesIn": .int(row.bytesIn), "bytesOut": .int(row.bytesOut),
                    "events": .int(row.events),
                ])
            }),
        ])
    }
}
