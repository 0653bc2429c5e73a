import MoonbaseCore

/// How `GET /admin/usage?by=` and `moonbase usage` group rows.
public enum UsageGrouping: String, Sendable, CaseIterable {
    case account
    case function
    case hour
    case day
    case month

    /// Parses `by=`; nil (the host answers 102/107) for anything else. Empty means `account`.
    public init?(query: String?) {
        guard let q = query, !q.isEmpty else { self = .account; return }
        self.init(rawValue: q)
    }
}

/// One row of a usage report, in the documented shape:
/// `{"key","units","refused","dbReads","dbWrites","luaCpuMs","wallMs","bytesIn","bytesOut","events"}`.
public struct UsageReportRow: Sendable, Hashable {
    public var key: String
    public var units: Int64
    public var refused: Int64
    public var dbReads: Int64
    public var dbWrites: Int64
    public var luaCpuMs: Double
    public var wallMs: Double
    public var bytesIn: Int64
    public var bytesOut: Int64
    /// Realtime events delivered to the account (free of units).
    public var events: Int64

    public init(key: String, units: Int64, refused: Int64, dbReads: Int64, dbWrites: Int64,
                luaCpuMs: Double, wallMs: Double, bytesIn: Int64, bytesOut: Int64, events: Int64 = 0) {
        self.events = events
        self.key = key
        self.units = units
        self.refused = refused
        self.dbReads = dbReads
        self.dbWrites = dbWrites
        self.luaCpuMs = luaCpuMs
        self.wallMs = wallMs
        self.bytesIn = bytesIn
        self.bytesOut = bytesOut
    }

    init(key: String, counts c: UsageCounts) {
        self.init(key: key, units: c.units, refused: c.refused, dbReads: c.dbReads, dbWrites: c.dbWrites,
                  luaCpuMs: Double(c.luaCpuMicros) / 1000, wallMs: Double(c.wallMicros) / 1000,
                  bytesIn: c.bytesIn, bytesOut: c.bytesOut, events: c.events)
    }

    /// The JSON field names, in the order above.
    public static let fieldNames = ["key", "units", "refused", "dbReads", "dbWrites", "luaCpuMs", "wallMs", "bytesIn", "bytesOut", "events"]
}

/// A usage report over [from, to): `{"from","to","by","rows":[…]}`.
public struct UsageReport: Sendable {
    public var from: Int64
    public var to: Int64
    public var by: UsageGrouping
    public var rows: [UsageReportRow]

    public init(from: Int64, to: Int64, by: UsageGrouping, rows: [UsageReportRow]) {
        self.from = from
        self.to = to
        self.by = by
        self.rows = rows
    }

    /// The range a report covers, aligned to whole hours (rows are hourly): `from` rounds down,
    /// `to` rounds up. Defaults: the current UTC month. `from`/`to` are ISO-8601 dates or instants
    /// (`ISO8601.parse`). Returns nil when either does not parse or `from` is not before `to`.
    public static func range(from: String?, to: String?, now: Int64) -> (from: Int64, to: Int64)? {
        var start = UTCCalendar.monthStart(now)
        var end = UTCCalendar.nextMonthStart(now)
        if let from, !from.isEmpty {
            guard let t = ISO8601.parse(from) else { return nil }
            start = t
        }
        if let to, !to.isEmpty {
            guard let t = ISO8601.parse(to) else { return nil }
            end = t
        }
        let f = UTCCalendar.hourStart(start), t = UTCCalendar.hourCeil(end)
        return f < t ? (f, t) : nil
    }

    /// Builds a report from in-memory rows with the same grouping and order as the store's
    /// usage reports (for sinks that keep rows in memory, tests, and to include unflushed rows).
    public static func aggregate(_ rows: [UsageRow], from: Int64, to: Int64, by: UsageGrouping) -> UsageReport {
        var sums: [String: UsageCounts] = [:]
        for row in rows where row.hour >= from && row.hour < to {
            switch by {
            case .account:
                guard row.kind == .account else { continue }
                sums[row.key, default: UsageCounts()].add(row.counts)
            case .function:
                guard row.kind == .function else { continue }
                sums[row.key, default: UsageCounts()].add(row.counts)
            case .hour:
                guard row.kind == .account, row.key == "app" else { continue }
                sums[ISO8601.format(millis: row.hour), default: UsageCounts()].add(row.counts)
            case .day:
                guard row.kind == .account, row.key == "app" else { continue }
                sums[ISO8601.format(millis: UTCCalendar.floor(row.hour, UTCCalendar.dayMillis)), default: UsageCounts()].add(row.counts)
            case .month:
                guard row.kind == .account, row.key == "app" else { continue }
                sums[ISO8601.format(millis: UTCCalendar.monthStart(row.hour)), default: UsageCounts()].add(row.counts)
            }
        }
        var out = sums.map { UsageReportRow(key: $0.key, counts: $0.value) }
        switch by {
        case .account:
            out.sort { a, b in
                if (a.key == "app") != (b.key == "app") { return a.key == "app" }
                return a.units != b.units ? a.units > b.units : a.key < b.key
            }
        case .function:
            out.sort { $0.units != $1.units ? $0.units > $1.units : $0.key < $1.key }
        case .hour, .day, .month:
            out.sort { $0.key < $1.key }
        }
        return UsageReport(from: from, to: to, by: by, rows: out)
    }
}
