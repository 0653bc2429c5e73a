import CSQLite
import MoonbaseCore

/// One SQLite connection (`sqlite3*`), opened in multi-thread mode (`SQLITE_OPEN_NOMUTEX`).
///
/// Thread-confined: SQLite's multi-thread mode lets different connections be used on different
/// threads at once but a connection by one thread at a time (https://sqlite.org/threadsafe.html),
/// so `Database` hands each thread its own reader and serialises the writer. Statements are
/// cached per connection by SQL text. Every connection has the `regexp` and `geo_distance`
/// functions (`Connection+Functions.swift`) and the database's registered `SQLFunction`s.
public final class Connection {
    /// Settings applied at open.
    public struct Options: Sendable {
        /// Page cache in KiB (`PRAGMA cache_size=-N`). Small: one reader per worker thread must
        /// fit the 60 MB RssAnon budget; mmap'd file pages do not count as private memory.
        public var cacheSizeKiB: Int = 4096
        /// `PRAGMA mmap_size` in bytes (file-backed, not anonymous memory). 2 GiB, which SQLite
        /// clamps to its build's limit (Debian's: 2 GiB − 64 KiB) and to the file's size: a read
        /// of a page past the map is a `pread` copied into the page cache. With 128 MiB a 417 MB
        /// file (W5's million posts) answered 5–6% more CPU per geo find than fully mapped (same
        /// binary otherwise, four alternated pairs). The map is address space shared by every
        /// connection to the file, not memory: resident pages are the kernel's page cache.
        public var mmapSize: Int = 2 << 30
        public var busyTimeoutMillis: Int32 = 5000
        /// Opens with `PRAGMA query_only=1`.
        public var readOnly = false
        public init() {}
    }

    let handle: OpaquePointer
    /// Path of the database file.
    public let path: String
    private var cache: [SQLKey: Statement] = [:]
    /// The same statements found by a number the caller gives their SQL text (`query(plan:)`).
    private var byPlan: [Int: Statement] = [:]
    private var isClosed = false
    /// Small values planners derive from this database and keep with the connection (a geo
    /// index's extent, re-read after a second, keyed by the index's quoted name): per connection,
    /// so never shared across files.
    public var memo: [String: Any] = [:]
    /// Statement cache bound: dynamic query SQL must not grow it without limit.
    static let maxCachedStatements = 256

    /// Opens (creating if needed) the database at `path` and applies the storage pragmas (WAL, synchronous=NORMAL, foreign keys, busy timeout).
    /// - Throws: `ParseError` 1 when the file cannot be opened.
    public init(path: String, options: Options = Options(), functions: [SQLFunction] = []) throws(ParseError) {
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let vfs = WALGather.vfsName
        let rc = sqlite3_open_v2(path, &db, flags, vfs)
        guard rc == SQLITE_OK, let db else {
            let msg = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(db)
            throw SQLiteError(code: rc, message: msg, sql: nil).parseError
        }
        self.handle = db
        self.path = path
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, options.busyTimeoutMillis)
        do {
            // A connection that writes copies pages for savepoints and statements that may roll
            // back alone: with a file-backed temp store that sub-journal is the moonbase VFS's
            // in-memory file (one memcpy per page), where temp_store=MEMORY keeps it in SQLite's
            // 1 KiB chunks (see Sources/CSQLiteWAL). Read-only, or without that VFS (when a
            // sub-journal would be a real temporary file), temporary data stays in memory.
            let tempStore = vfs != nil && !options.readOnly ? "FILE" : "MEMORY"
            try execute("""
                PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;
                PRAGMA temp_store=\(tempStore); PRAGMA secure_delete=OFF;
                PRAGMA cache_size=-\(options.cacheSizeKiB); PRAGMA mmap_size=\(options.mmapSize);
                """)
            if options.readOnly { try execute("PRAGMA query_only=1") }
            try installBuiltinFunctions()
            for f in functions { try install(f) }
        } catch {
            sqlite3_close_v2(db)
            throw error
        }
    }

    deinit { close() }

    /// Finalizes cached statements and closes the handle (idempotent). The connection must not
    /// be in use on another thread.
    public func close() {
        if isClosed { return }
        isClosed = true
        cache.removeAll()
        byPlan.removeAll()
        sqlite3_close_v2(handle)
    }

    public var closed: Bool { isClosed }

    /// How long a statement waits for another connection's lock before failing with SQLITE_BUSY.
    func setBusyTimeout(_ millis: Int32) { sqlite3_busy_timeout(handle, millis) }

    static func error(_ db: OpaquePointer, _ rc: Int32, sql: String?) -> SQLiteError {
        let ext = sqlite3_extended_errcode(db)
        let msg = String(cString: sqlite3_errmsg(db))
        return SQLiteError(code: ext != 0 ? ext : rc, message: msg, sql: sql, systemErrno: sqlite3_system_errno(db))
    }

    // MARK: Statements

    /// Runs a script of one or more statements without parameters (DDL, pragmas).
    /// Never pass request data here: it is for SQL built from validated names only.
    public func execute(_ sql: String) throws(ParseError) {
        var err: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &err)
        if rc != SQLITE_OK {
            let msg = err.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(err)
            throw SQLiteError(code: sqlite3_extended_errcode(handle), message: msg, sql: sql,
                              systemErrno: sqlite3_system_errno(handle)).parseError
        }
    }

    /// Runs `body` with the cached statement for `sql` (prepared once, `PERSISTENT`), then resets
    /// it. A re-entrant use of the same SQL gets a temporary statement.
    public func withStatement<R>(_ sql: String, _ body: (Statement) throws(ParseError) -> R) throws(ParseError) -> R {
        let stmt: Statement
        let key = SQLKey(sql)
        let cached = cache[key]
        if let s = cached, !s.inUse {
            stmt = s
        } else if cached == nil {
            stmt = try Statement(db: handle, sql: sql, persistent: true)
            if cache.count >= Self.maxCachedStatements {
                if let victim = cache.first(where: { !$0.value.inUse })?.key { cache.removeValue(forKey: victim) }
            }
            cache[key] = stmt
        } else {
            stmt = try Statement(db: handle, sql: sql, persistent: false)
        }
        stmt.inUse = true
        defer {
            stmt.reset()
            stmt.inUse = false
        }
        return try body(stmt)
    }

    /// Runs one statement to completion with `binds`; returns the number of rows changed.
    @discardableResult
    public func run(_ sql: String, _ binds: [SQLiteValue] = []) throws(ParseError) -> Int {
        try withStatement(sql) { (s) throws(ParseError) -> Int in
            try s.bind(binds)
            while try s.step() {}
            return Int(sqlite3_changes(handle))
        }
    }

    /// Runs a query, calling `row` for each result row.
    public func query(_ sql: String, _ binds: [SQLiteValue] = [], row: (Statement) throws(ParseError) -> Void) throws(ParseError) {
        try withStatement(sql) { (s) throws(ParseError) in
            try s.bind(binds)
            while try s.step() { try row(s) }
        }
    }

    /// `query(sql, binds, row:)` with the cached statement found by `plan`, a number the caller
    /// gives this SQL text for good (a hot query skips hashing its text on every run).
    public func query(plan: Int, _ sql: String, _ binds: [SQLiteValue], row: (Statement) throws(ParseError) -> Void) throws(ParseError) {
        guard let stmt = byPlan[plan], !stmt.inUse else {
            try query(sql, binds, row: row)
            if let s = cache[SQLKey(sql)] {
                if byPlan.count >= Self.maxCachedStatements { byPlan.removeAll() }
                byPlan[plan] = s
            }
            return
        }
        stmt.inUse = true
        defer {
            stmt.reset()
            stmt.inUse = false
        }
        try stmt.bind(binds)
        while try stmt.step() { try row(stmt) }
    }

    /// The first column of the first row, or nil when there is no row.
    public func scalar(_ sql: String, _ binds: [SQLiteValue] = []) throws(ParseError) -> SQLiteValue? {
        try withStatement(sql) { (s) throws(ParseError) -> SQLiteValue? in
            try s.bind(binds)
            return try s.step() ? s.value(0) : nil
        }
    }

    /// Runs `body` inside one read transaction (`BEGIN` … `COMMIT`) when none is open, so its
    /// statements share one snapshot and one WAL read lock. Outside a transaction SQLite takes
    /// and drops that lock (two `fcntl` calls) and starts and ends a transaction around every
    /// statement: a map query reading twenty grid cells paid that twenty times. Inside an open
    /// transaction (a write, a held read) `body` simply runs in it.
    public func inReadTransaction<T>(_ body: () throws(ParseError) -> T) throws(ParseError) -> T {
        guard isAutocommit else { return try body() }
        try run("BEGIN")
        defer {
            // Ending a read-only transaction cannot fail for lack of a lock; if it did anyway,
            // ROLLBACK ends it too (a reader left in a transaction would pin the WAL).
            if (try? run("COMMIT")) == nil, !isAutocommit { _ = try? run("ROLLBACK") }
        }
        return try body()
    }

    /// Rows changed by the last INSERT/UPDATE/DELETE.
    public var changes: Int { Int(sqlite3_changes(handle)) }
    /// Rowid of the last successful INSERT.
    public var lastInsertRowid: Int64 { sqlite3_last_insert_rowid(handle) }
    /// False while a transaction is open on this connection.
    public var isAutocommit: Bool { sqlite3_get_autocommit(handle) != 0 }
    /// Number of statements in the cache (tests).
    public var cachedStatementCount: Int { cache.count }
}

/// The statement cache's key: an SQL text, hashed by folding its bytes eight at a time.
/// `String`'s own hash (SipHash over every byte) cost 1,200–1,700 instructions per lookup of the
/// few-hundred-byte texts queries use: ~5,500 of a map query's instructions, a statement per
/// write. The fold reads every byte (texts that differ anywhere, however alike, hash apart as
/// before) at a few instructions per eight; `Hasher` then mixes the one word with its
/// per-process seed. Equality still compares whole texts (the same `String` storage compares by
/// pointer), so a fold collision can cost a comparison, never the wrong statement.
struct SQLKey: Hashable {
    let text: String
    init(_ text: String) { self.text = text }

    static func == (a: SQLKey, b: SQLKey) -> Bool { a.text == b.text }

    func hash(into hasher: inout Hasher) {
        var text = self.text
        hasher.combine(text.withUTF8 { Self.fold($0) })
    }

    static func fold(_ b: UnsafeBufferPointer<UInt8>) -> UInt64 {
        let raw = UnsafeRawBufferPointer(b)
        var h = UInt64(truncatingIfNeeded: raw.count) &* 0x9E37_79B9_7F4A_7C15
        var i = 0
        while i + 8 <= raw.count {
            h = (h ^ raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* 0xFF51_AFD7_ED55_8CCD
            h ^= h >> 29
            i += 8
        }
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while i < raw.count {
            tail |= UInt64(raw[i]) << shift
            shift += 8
            i += 1
        }
        h = (h ^ tail) &* 0xC4CE_B9FE_1A85_EC53
        return h ^ (h >> 32)
    }
}
