import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import Synchronization

/// The change feed on PostgreSQL: the same `_mb_changes` rows as on SQLite, numbered so that no
/// reader can see seq N+1 before N has committed, whichever host wrote them.
///
/// How: writes only note their changes in the transaction (`recordChange`); as the last
/// statements before COMMIT, the transaction takes one database-wide transaction-scoped
/// advisory lock and inserts its rows with `nextval`. The lock is held until the commit is
/// visible, so the next transaction to number rows does so after this one committed: seqs are
/// assigned in commit order (a rolled-back transaction leaves a gap, never a late row). The
/// cost is that commits which write feed rows queue on that lock for two short statements.
///
/// The listener of this host (`setChangeListener`) hears each committed transaction's events
/// in seq order: a ticket taken under the lock orders the deliveries of concurrent commits, and
/// `PGFanout` merges them with the other hosts' changes (read from the feed) without gap or
/// duplicate. Updates and deletes store the object before the write (`prev`), so another host
/// tells update, enter and leave apart as this one does; creates store nothing more.
extension PostgresStore: ChangeFeedStore {
    static let feedKey = "moonbase.pg.changes"
    /// Key of the advisory lock numbering the feed ("mbfeed" in ASCII).
    static let feedLockKey: Int64 = 0x6d62_6665_6564

    public func setChangeListener(_ listener: (any ChangeListener)?) {
        changes.set(listener)
        guard listener != nil else { return }
        watch.ensureStarted(url: url)
        fanout.follow(from: (try? changeFeedHead()) ?? 0, store: self)
    }

    /// Notes a committed-to-be change of one object in `tx` (numbered at commit). Every write
    /// path calls it (set-based writes once per row): a delete with the row's read permissions
    /// (`perm`, `|a|b|` form), a save with the object as now stored; `original` is the object
    /// before the write (updates and deletes), stored in the feed row for the other hosts. The
    /// objects are only kept in memory when this host's listener observes the class.
    public func recordChange(_ tx: PGTransaction, _ className: String, objectId: String, op: ChangeEvent.Op, perm: String?,
                             original: StoredObject?, current: StoredObject?) throws(ParseError) {
        var e = PGFeedEntry(className: className, objectId: objectId, op: op, perm: perm)
        let before = try original?.json(for: .master)
        e.prev = before.map { .object($0) } ?? .null
        if let l = changes.listener, l.observes(className) {
            e.observed = true
            e.original = before
            e.current = try current?.json(for: .master)
        }
        var list = tx.userInfo.removeValue(forKey: Self.feedKey) as? [PGFeedEntry] ?? []
        list.append(e)
        tx.userInfo[Self.feedKey] = list
    }

    /// Numbers the transaction's noted changes (the last statements before COMMIT) and queues
    /// their events for this host's listener and its announcement to the other hosts.
    /// - Returns: the delivery ticket taken, if any.
    func flushChanges(_ tx: PGTransaction) throws(ParseError) -> UInt64? {
        guard let entries = tx.userInfo.removeValue(forKey: Self.feedKey) as? [PGFeedEntry], !entries.isEmpty else { return nil }
        let c = tx.connection
        try c.execute("SELECT pg_advisory_xact_lock($1)", [.integer(Self.feedLockKey)])
        let rows: [JSONValue] = entries.map {
            .array([.string($0.className), .string($0.objectId), .string($0.op.rawValue), $0.perm.map { .string($0) } ?? .null, $0.prev])
        }
        let r = try c.execute("""
            INSERT INTO _mb_changes(seq, cls, oid, op, at, perm, prev)
            SELECT nextval('_mb_changes_seq'), e ->> 0, e ->> 1, e ->> 2, $1, e ->> 3, NULLIF(e -> 4, 'null'::jsonb)
            FROM (SELECT e FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS x(e, n) ORDER BY n) s
            RETURNING seq
            """, [.integer(clock.nowMillis()), .json(JSONValue.array(rows).jsonBytes)])
        let seqs = r.rows.compactMap { $0[0].int64 }.sorted()
        guard seqs.count == entries.count, let first = seqs.first, let last = seqs.last else {
            throw ParseError.internalError("change feed: \(seqs.count) seqs for \(entries.count) rows")
        }
        var events: [ChangeEvent] = []
        if changes.listener != nil {
            for (i, e) in entries.enumerated() {
                if e.observed {
                    events.append(ChangeEvent(seq: seqs[i], className: e.className, objectId: e.objectId, op: e.op,
                                              original: e.original, current: e.current, hasPayload: true))
                } else {
                    ChangeEvent.appendMark(&events, className: e.className, seq: seqs[i], op: e.op)
                }
            }
        }
        // Taken under the feed lock: tickets follow seq order on this host.
        let ticket = publishOrder.take()
        let order = publishOrder
        let fanout = self.fanout
        let batch = PGLocalBatch(first: first, last: last, events: events)
        tx.onCommit { order.finish(ticket) { fanout.committed(batch, store: self) } }
        return ticket
    }

    // MARK: reading

    public func changeFeedHead() throws(ParseError) -> Int64 {
        try pool.withConnection { (c) throws(ParseError) -> Int64 in
            try c.execute("""
                SELECT greatest(coalesce((SELECT max(seq) FROM _mb_changes), 0),
                                coalesce((SELECT v FROM _mb_changes_meta WHERE k = 'horizon'), 0))::int8
                """).scalar?.int64 ?? 0
        }
    }

    public func checkChangeFeed(since: Int64) throws(ParseError) {
        guard since > 0 else { return }
        let horizon = try pool.withConnection { (c) throws(ParseError) -> Int64 in
            try c.execute("SELECT v FROM _mb_changes_meta WHERE k = 'horizon'").scalar?.int64 ?? 0
        }
        if since < horizon { throw ParseError(.invalidEventName, "history expired: resynchronise") }
    }

    public func changeFeed(_ className: String, after: Int64, through: Int64 = .max, limit: Int) throws(ParseError) -> [ChangeFeedRow] {
        try SchemaCatalog.validateClassName(className)
        return try pool.withConnection { (c) throws(ParseError) -> [ChangeFeedRow] in
            let hasTable = try c.execute("SELECT to_regclass($1) IS NOT NULL", [.text(Naming.table(className))]).scalar == .bool(true)
            let latest = "NOT EXISTS (SELECT 1 FROM _mb_changes n WHERE n.cls = c.cls AND n.oid = c.oid AND n.seq > c.seq)"
            let sql = hasTable
                ? """
                  SELECT c.seq, c.op, c.oid, c.perm, t.objectId IS NOT NULL, \(Self.objectColumns(alias: "t")) FROM _mb_changes c
                  LEFT JOIN \(Naming.table(className)) t ON t.objectId = c.oid
                  WHERE c.cls = $1 AND c.seq > $2 AND c.seq <= $3 AND \(latest) ORDER BY c.seq LIMIT $4
                  """
                : "SELECT c.seq, c.op, c.oid, c.perm, false FROM _mb_changes c WHERE c.cls = $1 AND c.seq > $2 AND c.seq <= $3 AND \(latest) ORDER BY c.seq LIMIT $4"
            let r = try c.execute(sql, [.text(className), .integer(after), .integer(through), .integer(Int64(limit))])
            return r.rows.map { row in
                let op: ChangeEvent.Op = row[1].string == "delete" ? .delete : .save
                let obj = row[4] == .bool(true) ? StoredObject(className: className, pgRow: row, offset: 5) : nil
                return ChangeFeedRow(seq: row[0].int64 ?? 0, op: op, objectId: row[2].string ?? "",
                                     object: op == .save ? obj : nil, perm: row[3].string)
            }
        }
    }

    @discardableResult
    public func compactChangeFeed(batch: Int = 10_000) throws(ParseError) -> Int {
        try write { (tx) throws(ParseError) -> Int in
            let c = tx.connection
            let from = try c.execute("SELECT v FROM _mb_changes_meta WHERE k = 'compacted'").scalar?.int64 ?? 0
            // Only up to the first row younger than the grace: another host may not have read
            // the rows such a row supersedes yet (their `prev` is the object between two writes).
            let cutoff = clock.nowMillis() - feedCompactionGraceMillis
            guard let to = try c.execute("""
                SELECT max(seq) FROM (SELECT seq FROM _mb_changes WHERE seq > $1 ORDER BY seq LIMIT $2) s
                WHERE s.seq < coalesce((SELECT min(seq) FROM _mb_changes WHERE seq > $1 AND at > $3), 9223372036854775807)
                """, [.integer(from), .integer(Int64(batch)), .integer(cutoff)]).scalar?.int64 else { return 0 }
            try c.execute("""
                DELETE FROM _mb_changes WHERE seq IN (
                  SELECT o.seq FROM _mb_changes n JOIN _mb_changes o ON o.cls = n.cls AND o.oid = n.oid AND o.seq < n.seq
                  WHERE n.seq > $1 AND n.seq <= $2)
                """, [.integer(from), .integer(to)])
            try c.execute("""
                INSERT INTO _mb_changes_meta(k, v) VALUES('compacted', $1)
                ON CONFLICT (k) DO UPDATE SET v = greatest(_mb_changes_meta.v, excluded.v)
                """, [.integer(to)])
            return Int(to - from)
        }
    }

    @discardableResult
    public func purgeChangeFeed(before cutoff: Int64) throws(ParseError) -> Int {
        try write { (tx) throws(ParseError) -> Int in
            let c = tx.connection
            // Kept off a backward walk of the primary key looking for the newest old tombstone
            // (the whole feed when there is none): the subquery is planned on its own
            // (`OFFSET 0`) and reads the tombstone index.
            guard let maxSeq = try c.execute("SELECT max(seq) FROM (SELECT seq FROM _mb_changes WHERE op = 'delete' AND at < $1 OFFSET 0) s",
                                             [.integer(cutoff)]).scalar?.int64 else { return 0 }
            let n = try c.execute("DELETE FROM _mb_changes WHERE op = 'delete' AND at < $1", [.integer(cutoff)]).affectedRows
            try c.execute("""
                INSERT INTO _mb_changes_meta(k, v) VALUES('horizon', $1)
                ON CONFLICT (k) DO UPDATE SET v = greatest(_mb_changes_meta.v, excluded.v)
                """, [.integer(maxSeq)])
            return n
        }
    }
}

/// One change noted in a transaction, numbered at its commit.
struct PGFeedEntry {
    var className: String
    var objectId: String
    var op: ChangeEvent.Op
    var perm: String?
    /// The object before an update or delete (JSON null for a create).
    var prev: JSONValue = .null
    var observed = false
    var original: JSONObject?
    var current: JSONObject?
}

/// Delivers this host's committed batches to the listener in ticket (= seq) order, although
/// their commit hooks run on different threads in any order. A ticket whose transaction did
/// not commit (rolled back, or rerun after a serialization failure) is finished empty by
/// `PostgresStore.write`, so later ones never wait for it forever.
final class PGPublishSequencer: Sendable {
    private struct State {
        var issued: UInt64 = 0
        var next: UInt64 = 0
        var ready: [UInt64: @Sendable () -> Void] = [:]
    }
    private let state = Mutex(State())

    /// A new ticket (call under the feed lock).
    func take() -> UInt64 { state.withLock { s in defer { s.issued += 1 }; return s.issued } }

    /// Marks `ticket` done with `deliver` (nil: nothing to deliver) and runs every delivery
    /// whose turn has come, in order, under the lock (deliveries only enqueue). Finishing a
    /// ticket twice does nothing the second time.
    func finish(_ ticket: UInt64, _ deliver: (@Sendable () -> Void)?) {
        state.withLock { s in
            guard ticket >= s.next, s.ready[ticket] == nil else { return }
            s.ready[ticket] = deliver ?? {}
            while let d = s.ready.removeValue(forKey: s.next) {
                d()
                s.next += 1
            }
        }
    }
}
