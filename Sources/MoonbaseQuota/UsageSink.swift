/// One aggregated usage row: deltas to add to the stored row of (kind, key, hour).
public struct UsageRow: Hashable, Sendable {
    public var bucket: UsageBucket
    public var counts: UsageCounts

    public init(bucket: UsageBucket, counts: UsageCounts) {
        self.bucket = bucket
        self.counts = counts
    }

    public var kind: UsageKind { bucket.kind }
    public var key: String { bucket.key }
    /// Start of the UTC hour, ms since the epoch.
    public var hour: Int64 { bucket.hour }
}

/// The absolute count of one per-minute rate window (`user:…`, `ip:…`, `function:NAME|user:…`).
public struct WindowCount: Hashable, Sendable {
    public var key: String
    /// Start of the window's UTC minute, ms since the epoch.
    public var minute: Int64
    /// What this host counts in the window (its own requests plus those it knows other hosts
    /// served): what a single host stores.
    public var count: Int64
    /// This host's own requests in the window: what a host sharing the database stores as its
    /// part (the window's total is the sum of the hosts' parts).
    public var own: Int64

    public init(key: String, minute: Int64, count: Int64, own: Int64? = nil) {
        self.key = key
        self.minute = minute
        self.count = count
        self.own = own ?? count
    }
}

/// What a flush on a database shared by several hosts reads back: the totals of all hosts.
public struct SharedUsage: Sendable, Equatable {
    /// The app's units in the month.
    public var appMonthUnits: Int64
    /// The current minute's windows, by key (the sum of every host's part).
    public var windows: [String: Int64]

    public init(appMonthUnits: Int64, windows: [String: Int64]) {
        self.appMonthUnits = appMonthUnits
        self.windows = windows
    }
}

/// What one flush writes.
public struct UsageBatch: Sendable {
    /// Deltas to *add* to the stored hourly rows.
    public var rows: [UsageRow]
    /// Absolute window counts to *replace* .
    public var windows: [WindowCount]
    /// Windows of minutes before this one are stale and may be deleted.
    public var pruneWindowsBefore: Int64

    public init(rows: [UsageRow], windows: [WindowCount], pruneWindowsBefore: Int64) {
        self.rows = rows
        self.windows = windows
        self.pruneWindowsBefore = pruneWindowsBefore
    }

    /// Nothing to write (the flusher then skips the sink entirely).
    public var isEmpty: Bool { rows.isEmpty && windows.isEmpty }

    /// Sum of the rows' counts per kind (for tests and logs).
    public func total(kind: UsageKind, key: String? = nil) -> UsageCounts {
        var t = UsageCounts()
        for r in rows where r.kind == kind && (key == nil || r.key == key) { t.add(r.counts) }
        return t
    }
}

/// What the host loads on start so limits survive a restart.
public struct UsageSnapshot: Sendable {
    /// Units charged to the app in the current UTC month.
    public var appMonthUnits: Int64
    /// Windows of the current minute.
    public var windows: [WindowCount]

    public init(appMonthUnits: Int64, windows: [WindowCount]) {
        self.appMonthUnits = appMonthUnits
        self.windows = windows
    }
}

/// Durable storage for usage, implemented by the store (MoonbaseStore's `UsageStore`).
///
/// Contract:
/// - `write` applies a whole batch in ONE transaction (all rows and windows, or nothing) and
///   throws if it could not; the flusher then keeps the batch's deltas in memory and retries on
///   the next flush, so a failed write loses nothing and nothing is counted twice.
/// - `write` is only ever called from one thread at a time (the flusher serialises flushes).
/// - `loadTotals` is called once on start, before requests are served.
public protocol UsageSink: Sendable {
    /// Adds `batch.rows` to the hourly rows, replaces `batch.windows`, and deletes windows older
    /// than `batch.pruneWindowsBefore`, in one transaction.
    func write(_ batch: UsageBatch) throws

    /// The app's units in [monthStart, monthEnd) and the stored windows of `minute`.
    func loadTotals(monthStart: Int64, monthEnd: Int64, minute: Int64) throws -> UsageSnapshot

    /// Several hosts on one database: `write` (an empty batch writes nothing), then, in the same
    /// transaction, the app's units in [monthStart, monthEnd) and the windows of `minute` as
    /// every host flushed them. Nil from a sink only one host uses (SQLite): its own counts are
    /// then the whole truth.
    func writeReadingShared(_ batch: UsageBatch, monthStart: Int64, monthEnd: Int64, minute: Int64) throws -> SharedUsage?
}

extension UsageSink {
    public func writeReadingShared(_ batch: UsageBatch, monthStart: Int64, monthEnd: Int64, minute: Int64) throws -> SharedUsage? {
        if !batch.isEmpty { try write(batch) }
        return nil
    }
}
