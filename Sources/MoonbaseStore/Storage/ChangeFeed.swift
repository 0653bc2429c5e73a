import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// The change feed: a database-wide, strictly increasing sequence number per committed write,
/// kept in `_mb_changes`, compacted to one row per object (its latest write; a delete leaves a
/// tombstone with the row's read permissions, so tombstones are filtered like objects).
///
/// Rows are written by the write paths in the same transaction as the write (set-based writes
/// with one `INSERT … SELECT`), so a reader never sees a write without its row or the reverse.
/// SQLite serialises writers, so seqs grow in commit order.
///
/// Writes only append: replacing an object's earlier row in the write itself cost three random
/// B-tree deletions per row (4-5x the cost of a bulk delete's own work, measured), so superseded
/// rows are removed in the background (`compact`) and readers skip a row that a later row of
/// the same object supersedes: reads are always compacted. Deleted-object tombstones older than
/// the retention are purged (`purge`); the highest purged seq is the purge horizon.
///
/// Rows name their object by objectId (`oid`) and by its row id in the class table (`rid`). The
/// by-object index is keyed by (cls, rid): a create's rid is its class's highest, so its row
/// goes to the index's right edge, where objectIds (random by design) sent each create to a
/// random leaf. SQLite may hand out a rid again (max(rid) + 1 after the row holding it is
/// deleted), so lookups match the objectId too.
///
/// Only save rows are indexed by object (`_mb_changes_obj ... WHERE op = 'save'`): a tombstone
/// is always its object's last row (objectIds are never given by clients, so a deleted object
/// does not come back), so nothing needs to find one by object. A save is superseded by a later
/// save of its object (found through that index) or by its object's deletion, which a reader
/// sees as the object's row being gone; compaction removes the saves older than each new row.
/// Indexing tombstones cost a random B-tree insert per deleted row: ~30% of a bulk cleanup.
public enum ChangeFeed {
    static let table = "_mb_changes"

    // MARK: writing (called by the WriteTransaction write paths)

    /// Records the write of the rows of `className` selected by `filter` (SQL over the class
    /// table aliased `t`): before a delete, update or set-based update (the filter still selects
    /// the rows), after an insert. With a listener, the write's events are queued for after the
    /// commit; call `complete` once the write is done so saves carry their objects.
    /// - Returns: the number of events queued (0 without a listener).
    @discardableResult
    static func record(_ tx: WriteTransaction, _ className: String, op: ChangeEvent.Op, filter: String,
                       binds: [SQLiteValue]) throws(ParseError) -> Int {
        let ctx = try tx.storeContext()
        let now = ctx.clock.nowMillis()
        let perm = op == .delete ? "t.rperm" : "NULL"
        let sql = "INSERT INTO _mb_changes(cls, oid, op, at, perm, rid) SELECT ?, t.objectId, ?, ?, \(perm), t.rid FROM \(Naming.table(className)) AS t WHERE \(filter)"
        let all: [SQLiteValue] = [.text(className), .text(op.rawValue), .integer(now)] + binds
        guard let listener = ctx.changes.listener, listener.observes(className) else {
            // Nobody listens to this class: no per-row events (a bulk job stays one statement),
            // only a mark of the highest seq so the listener knows how far the feed has gone.
            let n = try tx.connection.run(sql, all)
            if n > 0, ctx.changes.listener != nil {
                let last = tx.connection.lastInsertRowid
                var mark = ChangeEvent(seq: last, className: className, objectId: "", op: op, original: nil, current: nil,
                                       hasPayload: false)
                mark.firstSeq = last - Int64(n) + 1  // one statement's rows get consecutive seqs
                pend(tx, [mark])
            }
            return 0
        }
        var ids: [(Int64, String)] = []
        try tx.connection.query(sql + " RETURNING seq, oid", all) { (s) throws(ParseError) in
            ids.append((s.int64(0), s.text(1) ?? ""))
        }
        guard !ids.isEmpty else { return 0 }
        var events = ids.map { ChangeEvent(seq: $0.0, className: className, objectId: $0.1, op: op, original: nil,
                                           current: nil, hasPayload: false) }
        if op == .delete {
            for i in events.indices {
                events[i].original = try tx.connection.fetchRaw(className, objectId: events[i].objectId)?.json(for: .master)
                events[i].hasPayload = true
            }
        }
        pend(tx, events)
        return events.count
    }

    /// A create's row, from the values at hand: `record` with the filter `t.rid = ?` read the new
    /// row back from the class table (a B-tree seek) and built its statement's text on every
    /// call (the class table is in it); this statement's text is the same for every class, so it
    /// is prepared once per connection. Same row, same events.
    static let insertedSQL = "INSERT INTO _mb_changes(cls, oid, op, at, perm, rid) VALUES(?, ?, 'save', ?, NULL, ?)"

    /// Records the creation of `objectId` (row `rid` of `className`).
    /// - Returns: the number of events queued (0 or 1; 0 without a listener on the class).
    @discardableResult
    static func recordInserted(_ tx: WriteTransaction, _ className: String, objectId: String, rid: Int64) throws(ParseError) -> Int {
        let ctx = try tx.storeContext()
        let now = ctx.clock.nowMillis()
        try tx.connection.withStatement(insertedSQL) { (s) throws(ParseError) in
            try s.bind(.text(className), at: 1)
            try s.bind(.text(objectId), at: 2)
            try s.bind(.integer(now), at: 3)
            try s.bind(.integer(rid), at: 4)
            try s.step()
        }
        guard let listener = ctx.changes.listener else { return 0 }
        let seq = tx.connection.lastInsertRowid
        // Unobserved: a mark of the seq (an empty objectId), as `record` queues.
        let observed = listener.observes(className)
        pend(tx, [ChangeEvent(seq: seq, className: className, objectId: observed ? objectId : "", op: .save,
                              original: nil, current: nil, hasPayload: false)])
        return observed ? 1 : 0
    }

    /// Fills the last `count` queued save events with the objects as now stored and, from
    /// `originals` (`originals(…)` taken before the write), as they were.
    static func complete(_ tx: WriteTransaction, _ className: String, count: Int,
                         originals: [String: JSONObject]?) throws(ParseError) {
        guard count > 0, var list = tx.userInfo[pendingKey] as? [ChangeEvent],
              let l = try tx.storeContext().changes.listener, l.observes(className) else { return }
        for i in list.indices.suffix(count) where list[i].op == .save {
            list[i].current = try tx.connection.fetchRaw(className, objectId: list[i].objectId)?.json(for: .master)
            list[i].original = originals?[list[i].objectId]
            list[i].hasPayload = true
        }
        tx.userInfo[pendingKey] = list
    }

    /// Objects of `className` selected by `filter`, as the master sees them, before they
    /// change (only fetched while a listener observes the class).
    static func originals(_ tx: WriteTransaction, _ className: String, filter: String,
                          binds: [SQLiteValue]) throws(ParseError) -> [String: JSONObject]? {
        guard let l = try tx.storeContext().changes.listener, l.observes(className) else { return nil }
        var out: [String: JSONObject] = [:]
        try tx.connection.query("SELECT \(StoredObject.columns(alias: "t")) FROM \(Naming.table(className)) AS t WHERE \(filter)", binds) {
            (s) throws(ParseError) in
            let o = StoredObject(className: className, row: s)
            out[o.objectId] = try o.json(for: .master)
        }
        return out
    }

    static let pendingKey = "mb.changes"

    /// Queues events to publish after the outermost commit (one hook per batch; a rolled-back
    /// savepoint drops its events and hook with the rest of its `userInfo`).
    static func pend(_ tx: WriteTransaction, _ events: [ChangeEvent]) {
        // Taken out of `userInfo` while it changes: edited in place there, the list was copied on
        // every event (n observed writes in one transaction cost O(n²)).
        var list = tx.userInfo.removeValue(forKey: pendingKey) as? [ChangeEvent] ?? []
        let first = list.isEmpty
        if events.count == 1, events[0].isMark, let last = list.last, last.isMark, last.className == events[0].className {
            list[list.count - 1].seq = events[0].seq  // consecutive marks of one class: one range
        } else {
            list.append(contentsOf: events)
        }
        tx.userInfo[pendingKey] = list
        guard first else { return }
        tx.onCommit { [weak tx] in
            guard let tx, let batch = tx.userInfo[pendingKey] as? [ChangeEvent], !batch.isEmpty else { return }
            tx.userInfo[pendingKey] = nil
            (try? tx.storeContext())?.changes.listener?.publish(batch)
        }
    }

    // MARK: reading

    /// One feed row (the boundary type).
    public typealias Row = ChangeFeedRow

    /// Rows of `className` with `after < seq <= through`, in seq order, at most `limit`, each
    /// object once (a row superseded by a later one of the same object is skipped).
    public static func read(_ c: Connection, className: String, after: Int64, through: Int64 = .max,
                            limit: Int) throws(ParseError) -> [Row] {
        try SchemaCatalog.validateClassName(className)
        let hasTable = try c.scalar("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", [.text(className)]) != nil
        var rows: [Row] = []
        // Superseded: by a later save of the object, or, for a save, by the object being gone
        // (deleted later; without its class table every object is gone).
        // (A row without a rid, left from before rids were kept, is its object's last: see
        // `Migrator.upgradeToVersion4`.)
        let latest = "NOT EXISTS (SELECT 1 FROM _mb_changes n WHERE n.cls = c.cls AND n.rid = c.rid AND n.oid = c.oid AND n.op = 'save' AND n.seq > c.seq)"
        let sql = hasTable
            ? """
              SELECT c.seq, c.op, c.oid, c.perm, \(StoredObject.columns(alias: "t")) FROM _mb_changes c
              LEFT JOIN \(Naming.table(className)) t ON t.objectId = c.oid
              WHERE c.cls = ? AND c.seq > ? AND c.seq <= ? AND (c.op = 'delete' OR t.rid IS NOT NULL) AND \(latest)
              ORDER BY c.seq LIMIT ?
              """
            : "SELECT c.seq, c.op, c.oid, c.perm FROM _mb_changes c WHERE c.cls = ? AND c.seq > ? AND c.seq <= ? AND c.op = 'delete' AND \(latest) ORDER BY c.seq LIMIT ?"
        try c.query(sql, [.text(className), .integer(after), .integer(through), .integer(Int64(limit))]) { (s) throws(ParseError) in
            let op: ChangeEvent.Op = s.text(1) == "delete" ? .delete : .save
            let obj = hasTable && !s.isNull(4) ? StoredObject(className: className, row: s, offset: 4) : nil
            rows.append(Row(seq: s.int64(0), op: op, objectId: s.text(2) ?? "", object: op == .save ? obj : nil, perm: s.text(3)))
        }
        return rows
    }

    /// The highest seq written so far (0 when none).
    public static func head(_ c: Connection) throws(ParseError) -> Int64 {
        if case .integer(let n)? = try c.scalar("SELECT seq FROM sqlite_sequence WHERE name = '_mb_changes'") { return n }
        return 0
    }

    /// The highest purged seq: a `since` below it (and above 0) may have missed deletes.
    public static func horizon(_ c: Connection) throws(ParseError) -> Int64 {
        if case .integer(let n)? = try c.scalar("SELECT v FROM _mb_changes_meta WHERE k = 'horizon'") { return n }
        return 0
    }

    /// Throws 160 when `0 < since < horizon`.
    public static func checkSince(_ c: Connection, _ since: Int64) throws(ParseError) {
        guard since > 0 else { return }
        if since < (try horizon(c)) {
            throw ParseError(.invalidEventName, "history expired: resynchronise")
        }
    }

    /// Removes saves superseded by a later row of the same object, for at most `batch` rows
    /// written since the last pass (one short write transaction; call until it returns 0).
    /// - Returns: the number of new rows examined.
    @discardableResult
    public static func compact(_ db: Database, batch: Int = 10_000) throws(ParseError) -> Int {
        try db.write { (tx) throws(ParseError) -> Int in try compactPass(tx.connection, batch: batch) }
    }

    /// How compaction finds an object's earlier saves: through the by-object index of schema
    /// version 4 on (`rid`), or of the versions before (`oid`: only the upgrade to 4 uses it).
    enum ObjectKey { case rid, oid }

    /// One compaction pass on `c`, inside the caller's write transaction: the saves superseded
    /// by the at most `batch` rows written since the last pass are deleted, and the pass's end
    /// is recorded. - Returns: the number of new rows examined.
    static func compactPass(_ c: Connection, batch: Int, by key: ObjectKey = .rid) throws(ParseError) -> Int {
        var from: Int64 = 0
        if case .integer(let n)? = try c.scalar("SELECT v FROM _mb_changes_meta WHERE k = 'compacted'") { from = n }
        guard case .integer(let to)? = try c.scalar(
            "SELECT max(seq) FROM (SELECT seq FROM _mb_changes WHERE seq > ? ORDER BY seq LIMIT ?)", [.integer(from), .integer(Int64(batch))])
        else { return 0 }
        let rid = key == .rid ? "o.rid = n.rid AND " : ""
        _ = try c.run("""
            DELETE FROM _mb_changes WHERE seq IN (
              SELECT o.seq FROM _mb_changes n JOIN _mb_changes o ON o.cls = n.cls AND \(rid)o.oid = n.oid AND o.op = 'save' AND o.seq < n.seq
              WHERE n.seq > ? AND n.seq <= ?)
            """, [.integer(from), .integer(to)])
        _ = try c.run("INSERT INTO _mb_changes_meta(k, v) VALUES('compacted', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", [.integer(to)])
        return Int(to - from)
    }

    /// The newest tombstone written before a cutoff, through the tombstone index: as a plain
    /// `max(seq)` SQLite walked the feed from its newest row down to the first old tombstone,
    /// the whole feed when there is none (97 ms for a million saves, every 30 s, holding the
    /// writer).
    static let newestOldTombstoneSQL = "SELECT max(seq) FROM _mb_changes INDEXED BY _mb_changes_tomb WHERE op = 'delete' AND at < ?"

    /// Deletes tombstones written before `cutoff` (ms) and advances the horizon.
    /// - Returns: the number of tombstones purged.
    @discardableResult
    public static func purge(_ db: Database, before cutoff: Int64) throws(ParseError) -> Int {
        try db.write { (tx) throws(ParseError) -> Int in
            let c = tx.connection
            guard case .integer(let maxSeq)? = try c.scalar(newestOldTombstoneSQL, [.integer(cutoff)])
            else { return 0 }
            let n = try c.run("DELETE FROM _mb_changes WHERE op = 'delete' AND at < ?", [.integer(cutoff)])
            _ = try c.run("INSERT INTO _mb_changes_meta(k, v) VALUES('horizon', ?) ON CONFLICT(k) DO UPDATE SET v = max(v, excluded.v)", [.integer(maxSeq)])
            return n
        }
    }
}
