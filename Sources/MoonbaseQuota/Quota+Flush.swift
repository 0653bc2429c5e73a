import MoonbaseCore

extension Quota {
    /// Takes the pending usage deltas and the changed windows of the current minute as one batch
    /// (the flusher calls this; tests may too). Rows are sorted by hour, kind and key.
    public func drainBatch(now: Int64) -> UsageBatch {
        let minute = UTCCalendar.minuteStart(now)
        let rows = usage.drain().map { UsageRow(bucket: $0.key, counts: $0.value) }.sorted(by: Self.rowOrder)
        let changed = config.accountingEnabled ? windows.drainDirty(minute: minute) : []
        return UsageBatch(rows: rows, windows: changed.sorted { $0.key < $1.key }, pruneWindowsBefore: minute)
    }

    /// Puts a batch whose write failed back into memory, to be written with the next flush.
    public func requeue(_ batch: UsageBatch) {
        usage.add(rows: batch.rows)
        windows.markDirty(batch.windows)
    }

    /// The deltas not yet flushed (sorted like `drainBatch`), without taking them.
    public func pendingRows() -> [UsageRow] {
        usage.peek().map { UsageRow(bucket: $0.key, counts: $0.value) }.sorted(by: Self.rowOrder)
    }

    /// Restores limit counters from a snapshot loaded at start (counts only ever go up: a value
    /// already counted in memory is kept if higher).
    public func restore(_ snapshot: UsageSnapshot, now: Int64) {
        month.restore(month: UTCCalendar.monthIndex(now), count: snapshot.appMonthUnits)
        windows.restore(snapshot.windows, minute: UTCCalendar.minuteStart(now))
    }

    /// Loads the current month's app units and current minute's windows from `sink` and restores
    /// them; call once on start, before serving.
    public func load(from sink: any UsageSink) throws {
        let now = clock.nowMillis()
        let snapshot = try sink.loadTotals(monthStart: UTCCalendar.monthStart(now),
                                           monthEnd: UTCCalendar.nextMonthStart(now),
                                           minute: UTCCalendar.minuteStart(now))
        restore(snapshot, now: now)
    }

    static func rowOrder(_ a: UsageRow, _ b: UsageRow) -> Bool {
        if a.hour != b.hour { return a.hour < b.hour }
        if a.kind != b.kind { return a.kind.rawValue < b.kind.rawValue }
        return a.key < b.key
    }
}
