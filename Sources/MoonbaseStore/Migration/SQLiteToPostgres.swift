import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import MoonbaseSQLite

/// `moonbase migrate --to URL`: copies a SQLite store into an empty PostgreSQL database, keeping
/// every class (schema, declared indexes, permissions), every object as stored (objectId,
/// createdAt, updatedAt, ACL, document), relation join tables, and the internal tables a host
/// needs (file records, Parse Config, usage, mail tokens, failed logins, request ids).
///
/// The whole copy is ONE PostgreSQL transaction (DDL included, which PostgreSQL makes
/// transactional): a copy that fails part-way leaves the target as empty as it was. The SQLite
/// side is read in one read transaction, so the copy is a consistent snapshot even if a server
/// still writes to the file (its later writes are then not copied: stop it first).
///
/// Rows go over in multi-row `INSERT`s of `batchRows` rows; indexes are built after the rows
/// are in (one sort per index instead of one insertion per row).
///
/// The change feed is copied with its sequence numbers, and PostgreSQL numbers new changes
/// after the SQLite feed's last seq: a client resuming with a `since` from the old server reads
/// on without a gap (and one older than the purge horizon gets 160, as before).
///
/// ```swift
/// let source = try SQLiteDocumentStore(path: "data/moonbase.sqlite")
/// if let why = try SQLiteToPostgres.nonEmptyReason(url: url) { print(why) } else {
///     let summary = try SQLiteToPostgres(source: source, target: try PostgresStore(url: url)).run { print($0) }
/// }
/// ```
public struct SQLiteToPostgres {
    public let source: SQLiteDocumentStore
    public let target: PostgresStore
    /// Rows per multi-row `INSERT` (7 parameters each for class rows: far below PostgreSQL's
    /// 65535 parameter limit).
    public var batchRows = 500

    /// What one run copied.
    public struct Summary: Sendable {
        /// (table, rows copied), in copy order: classes first, then join and internal tables.
        public var tables: [(name: String, rows: Int)] = []
        public var seconds: Double = 0
        public var totalRows: Int { tables.reduce(0) { $0 + $1.rows } }
        public var rowsPerSecond: Int { seconds > 0 ? Int(Double(totalRows) / seconds) : totalRows }
    }

    /// How each internal SQLite table (`_mb_*`, join tables aside) is carried over. Every table
    /// the SQLite migrator makes must be listed: a table that is not makes the copy fail (a
    /// newer table must not be dropped silently).
    public enum InternalTable: Sendable, Equatable {
        /// Copied row for row into the PostgreSQL table of the same name and columns.
        case copy
        /// Not copied, for the reason given.
        case skip(String)
    }

    public static let internalTables: [String: InternalTable] = [
        "_mb_schema": .skip("written per class with the class's table and indexes"),
        "_mb_changes": .copy,
        "_mb_changes_meta": .copy,
        "_mb_auth_epoch": .skip("a cache-validity counter; PostgreSQL keeps its own"),
        "_mb_request_ids": .copy,
        "_mb_usage": .copy,
        "_mb_usage_window": .copy,
        "_mb_login_failures": .copy,
        "_mb_files": .copy,
        "_mb_config": .copy,
        "_mb_email_tokens": .copy,
    ]

    /// Columns of internal SQLite tables that mean nothing on PostgreSQL and are not copied: a
    /// change-feed row's `rid` is its object's row id in the SQLite class table (the feed's
    /// by-object index key there); PostgreSQL's feed finds an object by its objectId.
    static let sqliteOnlyColumns: [String: Set<String>] = ["_mb_changes": ["rid"]]

    /// Internal tables that a fresh PostgreSQL database may already hold rows in, written by the
    /// migrator or by a host's first start, and that the copy replaces.
    static let bookkeeping: Set<String> = ["_mb_migrations", "_mb_auth_epoch", "_mb_schema"]

    public init(source: SQLiteDocumentStore, target: PostgresStore) {
        self.source = source
        self.target = target
    }

    // MARK: the empty-target rule

    /// Why the database at `url` is not empty (a table holding a row, Moonbase bookkeeping
    /// aside), or nil when a copy may go there. Reads only: a refused database is not touched.
    public static func nonEmptyReason(url: String) throws(ParseError) -> String? {
        let pool = try PGPool(url: url)
        defer { pool.close() }
        return try pool.withConnection { (c) throws(ParseError) in try nonEmptyReason(c) }
    }

    static func nonEmptyReason(_ c: PGConnection) throws(ParseError) -> String? {
        let tables = try c.execute("""
            SELECT tablename::text, quote_ident(tablename) FROM pg_tables WHERE schemaname = current_schema()
            ORDER BY tablename COLLATE "C"
            """).rows.compactMap { r -> (String, String)? in
                guard let name = r[0].string, let quoted = r[1].string else { return nil }
                return (name, quoted)
            }
        for (t, quoted) in tables where !bookkeeping.contains(t) {
            if try c.execute("SELECT EXISTS (SELECT 1 FROM \(quoted))").scalar == .bool(true) {
                return "table \(quoted) holds rows"
            }
        }
        return nil
    }

    // MARK: the copy

    /// Copies everything; `progress` receives one line per table and one per 10 000 objects of a class.
    /// - Throws: 108 when the target is no longer empty (another copy got there first), 107
    ///   for a document PostgreSQL cannot hold (a U+0000 character), 1 for an internal table
    ///   this build does not know, or PostgreSQL's and SQLite's own errors. Nothing is kept
    ///   in the target after a throw.
    public func run(progress: (String) -> Void) throws(ParseError) -> Summary {
        let started = monotonicNanos()
        var summary = Summary()
        try source.database.read { (sq) throws(ParseError) in
            try sq.execute("BEGIN")
            defer { try? sq.execute("COMMIT") }
            let sqliteTables = try Self.sqliteTables(sq)
            let (joins, internals) = try plan(sqliteTables, progress: progress)
            try target.pool.transaction(isolation: .readCommitted) { (tx) throws(ParseError) in
                let pg = tx.connection
                // Two copies into one database: the second waits here, then finds it taken.
                try pg.execute("SELECT pg_advisory_xact_lock($1)", [.integer(Self.lockKey)])
                if let why = try Self.nonEmptyReason(pg) {
                    throw ParseError(.commandUnavailable, "the target database is no longer empty: \(why)")
                }
                let classes = source.classNames.compactMap { source.schema($0) }
                let known = Set(sqliteTables)
                for s in classes { try PostgresLayout.ensureClassTable(s.className, pool: target.pool) }
                for s in classes {
                    let n = known.contains(s.className) ? try copyClass(s.className, sq, pg, progress: progress) : 0
                    summary.tables.append((s.className, n))
                }
                for s in classes {
                    for name in s.fieldOrder {
                        guard let f = s.fields[name], f.type == .relation, let to = f.targetClass else { continue }
                        if source.schema(to) == nil { try PostgresLayout.ensureClassTable(to, pool: target.pool) }
                        try PostgresLayout.ensureRelationTable(owner: s.className, field: name, target: to, pool: target.pool)
                        let table = "_mb_join:\(s.className):\(name)"
                        guard joins.contains(table) else { continue }
                        summary.tables.append((table, try copyTable(table, sq, pg, progress: progress)))
                    }
                }
                for s in classes {
                    for e in s.indexes.entries {
                        let spec = try IndexSpec(name: e.key, json: e.value)
                        if let ddl = PostgresLayout.indexDDL(s.className, spec, fields: s.fields) { try pg.executeScript(ddl) }
                    }
                    for name in s.fieldOrder where s.fields[name]?.type == .geoPoint {
                        try pg.executeScript(PostgresLayout.geoIndexDDL(s.className, name))
                    }
                    try target.stageSchema(s, in: tx)
                }
                for t in internals { summary.tables.append((t, try copyTable(t, sq, pg, progress: progress))) }
                try continueChangeFeed(sq, pg)
                // The users' rules (unique emails, session clean-up, no plain passwords) as a
                // host's start installs them: the copy is complete before any host opens it.
                if source.schema("_User") != nil { try target.installAccountRules() }
            }
        }
        summary.seconds = Double(monotonicNanos() - started) / 1e9
        return summary
    }

    /// Key of the advisory lock a copy holds ("mbcopy" in ASCII).
    static let lockKey: Int64 = 0x6d62_636f_7079

    /// Every table of the SQLite file (virtual tables' shadow tables included).
    static func sqliteTables(_ c: Connection) throws(ParseError) -> [String] {
        var out: [String] = []
        try c.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name") { (r) throws(ParseError) in
            if let n = r.text(0) { out.append(n) }
        }
        return out
    }

    /// Sorts the SQLite file's internal tables into join tables and internal tables to copy.
    /// - Throws: 1 naming an `_mb_*` table this build does not know how to carry over.
    func plan(_ tables: [String], progress: (String) -> Void) throws(ParseError) -> (joins: Set<String>, copy: [String]) {
        var joins: Set<String> = []
        var copy: [String] = []
        for t in tables where t.hasPrefix("_mb_") {
            if t.hasPrefix("_mb_join:") {
                joins.insert(t)
                let parts = t.split(separator: ":", omittingEmptySubsequences: false)
                let owner = parts.count == 3 ? source.schema(String(parts[1])) : nil
                if parts.count != 3 || owner?.fields[String(parts[2])]?.type != .relation {
                    progress("warning: \(t) belongs to no Relation field of the schema; not copied")
                }
                continue
            }
            switch Self.internalTables[t] {
            case .copy?: copy.append(t)
            case .skip?: break
            case nil:
                throw ParseError(.internalError, """
                    internal table \(t) is not known to this migrate: nothing was copied \
                    (a newer moonbase made it; migrate with that version)
                    """)
            }
        }
        return (joins, copy)
    }

    /// Copies one class's rows as stored; returns how many.
    func copyClass(_ className: String, _ sq: Connection, _ pg: PGConnection, progress: (String) -> Void) throws(ParseError) -> Int {
        let total = try Self.count(Naming.table(className), sq)
        progress("\(className): \(total) objects")
        var batch: [PGValue] = []
        var done = 0
        func flush() throws(ParseError) {
            let rows = batch.count / 7
            guard rows > 0 else { return }
            var sql = "INSERT INTO \(Naming.table(className))(objectId, createdAt, updatedAt, acl, rperm, wperm, data) VALUES "
            for i in 0..<rows {
                let p = i * 7
                sql += (i == 0 ? "" : ",") + "($\(p + 1),$\(p + 2),$\(p + 3),$\(p + 4),"
                    + "\(PostgresStore.permArray(p + 5)),\(PostgresStore.permArray(p + 6)),$\(p + 7))"
            }
            try pg.execute(sql, batch)
            done += rows
            batch.removeAll(keepingCapacity: true)
            if done % 10_000 < rows { progress("\(className): \(done)/\(total)") }
        }
        try sq.query("SELECT objectId, createdAt, updatedAt, ACL, rperm, wperm, data FROM \(Naming.table(className)) ORDER BY rid") { (r) throws(ParseError) in
            let objectId = r.text(0) ?? ""
            guard let data = r.bytes(6) else { throw ParseError(.internalError, "\(className) \(objectId): no document") }
            let stored: [UInt8]
            do throws(ParseError) { stored = try PostgresStore.storable(data) } catch {
                throw ParseError(error.code, "\(className) \(objectId): \(error.message)")
            }
            batch.append(.text(objectId))
            batch.append(.integer(r.int64(1)))
            batch.append(.integer(r.int64(2)))
            batch.append(r.bytes(3).map { .json($0) } ?? .null)
            batch.append(PostgresStore.permParam(r.text(4)))
            batch.append(PostgresStore.permParam(r.text(5)))
            batch.append(.json(stored))
            if batch.count >= batchRows * 7 { try flush() }
        }
        try flush()
        return done
    }

    /// Copies a table whose columns exist under the same names (PostgreSQL folds them to lower
    /// case) on both sides, each value converted to the PostgreSQL column's type.
    /// - Throws: 1 when PostgreSQL lacks the table or one of its columns.
    func copyTable(_ table: String, _ sq: Connection, _ pg: PGConnection, progress: (String) -> Void) throws(ParseError) -> Int {
        let quoted = "\"\(table)\""
        var columns: [String] = []
        try sq.query("SELECT name FROM pragma_table_info(?) ORDER BY cid", [.text(table)]) { (r) throws(ParseError) in
            if let n = r.text(0), !(Self.sqliteOnlyColumns[table]?.contains(n) ?? false) { columns.append(n) }
        }
        var pgTypes: [String: String] = [:]
        for r in try pg.execute("""
            SELECT column_name::text, data_type::text FROM information_schema.columns
            WHERE table_schema = current_schema() AND table_name = $1
            """, [.text(table)]).rows {
            if let n = r[0].string, let t = r[1].string { pgTypes[n] = t }
        }
        let types = try columns.map { (c) throws(ParseError) -> String in
            guard let t = pgTypes[c.lowercased()] else {
                throw ParseError(.internalError, "\(table).\(c) has no PostgreSQL counterpart: nothing was copied")
            }
            return t
        }
        let total = try Self.count(quoted, sq)
        progress("\(table): \(total) rows")
        let width = columns.count
        let perBatch = max(1, min(batchRows, 60_000 / max(width, 1)))
        var batch: [PGValue] = []
        var done = 0
        func flush() throws(ParseError) {
            let rows = batch.count / width
            guard rows > 0 else { return }
            var sql = "INSERT INTO \(quoted)(\(columns.joined(separator: ","))) VALUES "
            for i in 0..<rows {
                sql += (i == 0 ? "(" : ",(") + (1...width).map { "$\(i * width + $0)" }.joined(separator: ",") + ")"
            }
            try pg.execute(sql, batch)
            done += rows
            batch.removeAll(keepingCapacity: true)
        }
        let select = "SELECT " + columns.map { "\"\($0)\"" }.joined(separator: ",") + " FROM \(quoted)"
        try sq.query(select) { (r) throws(ParseError) in
            for i in 0..<width { batch.append(Self.value(r, Int32(i), as: types[i])) }
            if batch.count >= perBatch * width { try flush() }
        }
        try flush()
        return done
    }

    /// A SQLite column value as a parameter for a PostgreSQL column of type `pgType`.
    static func value(_ r: Statement, _ i: Int32, as pgType: String) -> PGValue {
        if r.isNull(i) { return .null }
        switch pgType {
        case "bigint", "integer", "smallint": return .integer(r.int64(i))
        case "boolean": return .bool(r.int64(i) != 0)
        case "double precision", "real", "numeric": return .real(r.double(i))
        case "jsonb", "json": return .json(r.bytes(i) ?? [])
        default: return .text(r.text(i) ?? "")
        }
    }

    /// The PostgreSQL feed numbers new changes after the SQLite feed's last seq (its rows were
    /// copied with their seqs), so no seq is handed out twice.
    func continueChangeFeed(_ sq: Connection, _ pg: PGConnection) throws(ParseError) {
        let head = try ChangeFeed.head(sq)
        guard head > 0 else { return }
        try pg.execute("SELECT setval('_mb_changes_seq', $1)", [.integer(head)])
    }

    static func count(_ quotedTable: String, _ sq: Connection) throws(ParseError) -> Int {
        if case .integer(let n)? = try sq.scalar("SELECT count(*) FROM \(quotedTable)") { return Int(n) }
        return 0
    }
}
