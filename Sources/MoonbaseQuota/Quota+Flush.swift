import MoonbaseCore
import Synchronization

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

    /// The keys of the current minute's windows (a flush on a shared database reads their totals).
    public func windowKeys(now: Int64) -> [String] { windows.keys(minute: UTCCalendar.minuteStart(now)) }

    /// The deltas not yet flushed (sorted like `drainBatch`), without taking them.
    public func pendingRows() -> [UsageRow] {
        usage.peek().map { UsageRow(bucket: $0.key, counts: $0.value) }.sorted(by: Self.rowOrder)
    }

    /// Restores limit counters from a snapshot loaded at start (counts only ever go up: a value
    /// already counted in memory is kept if higher).
    public func restore(_ snapshot: UsageSnapshot, now: Int64) {
        month.restore(month: UTCCalendar.monthIndex(now), count: snapshot.appMonthUnits)
        // Everything loaded was flushed by others (this process has flushed nothing yet).
        shared.withLock { $0 = SharedMonth(month: UTCCalendar.monthIndex(now), flushed: 0, others: snapshot.appMonthUnits) }
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

    /// Many hosts: after a flush of `batch` that read `totals` (the app's units of the month
    /// containing `now` and the minute's windows, as every host flushed them), raises the month
    /// counter and the windows by the other hosts' requests they did not know yet. A counter is
    /// then the shared total plus this host's requests not flushed yet, so hosts refuse once the
    /// cluster as a whole reached the limit (up to what the others served since their last flush
    /// and this host's last read).
    public func absorbShared(_ totals: SharedUsage, batch: UsageBatch, now: Int64) {
        windows.absorb(totals.windows, minute: UTCCalendar.minuteStart(now))
        let total = totals.appMonthUnits
        let m = UTCCalendar.monthIndex(now)
        let monthStart = UTCCalendar.monthStart(now)
        var mine: Int64 = 0
        for r in batch.rows where r.kind == .account && r.key == "app" && r.hour >= monthStart { mine += r.counts.units }
        shared.withLock { st in
            if st.month != m { st = SharedMonth(month: m, flushed: 0, others: 0) }
            st.flushed += mine
            let others = total - st.flushed
            guard others > st.others else { return }
            month.add(month: m, others - st.others)
            st.others = others
        }
    }

    static func rowOrder(_ a: UsageRow, _ b: UsageRow) -> Bool {
        if a.hour != b.hour { return a.hour < b.hour }
        if a.kind != b.kind { return a.kind.rawValue < b.kind.rawValue }
        return a.key < b.key
    }
}
