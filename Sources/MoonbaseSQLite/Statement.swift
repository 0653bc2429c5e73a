import CSQLite
import MoonbaseCore

/// `SQLITE_TRANSIENT` is a macro Swift cannot import: SQLite copies the bytes.
let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// A prepared statement (`sqlite3_prepare_v3`, `SQLITE_PREPARE_PERSISTENT` when cached).
///
/// Thread-confined like its `Connection`. Use it inside `Connection.withStatement(_:_:)`, which
/// resets it and clears its bindings afterwards; column reads are valid after `step()` returned
/// `true` and until the next `step()`/reset.
public final class Statement {
    let handle: OpaquePointer
    /// The SQL text (also the cache key).
    public let sql: String
    let db: OpaquePointer
    /// Set while a caller holds the statement, so a re-entrant user of the same SQL (a trigger
    /// running inside an outer iteration) gets a temporary statement instead of clobbering it.
    var inUse = false

    init(db: OpaquePointer, sql: String, persistent: Bool) throws(ParseError) {
        var stmt: OpaquePointer?
        let flags: UInt32 = persistent ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        let rc = sql.withCString { sqlite3_prepare_v3(db, $0, -1, flags, &stmt, nil) }
        guard rc == SQLITE_OK, let stmt else {
            sqlite3_finalize(stmt)
            throw Connection.error(db, rc, sql: sql).parseError
        }
        self.handle = stmt
        self.sql = sql
        self.db = db
    }

    deinit { sqlite3_finalize(handle) }

    // MARK: Binding (1-based indexes, as in SQLite)

    /// Binds one value at a 1-based parameter index.
    public func bind(_ value: SQLiteValue, at index: Int32) throws(ParseError) {
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(handle, index)
        case .integer(let i): rc = sqlite3_bind_int64(handle, index, i)
        case .real(let d): rc = sqlite3_bind_double(handle, index, d)
        case .text(var s):
            rc = s.withUTF8 { buf in bindRawText(UnsafeRawPointer(buf.baseAddress), buf.count, index) }
        case .blob(let b):
            rc = b.withUnsafeBytes { sqlite3_bind_blob(handle, index, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, Int32($0.count), sqliteTransient) }
        }
        guard rc == SQLITE_OK else { throw Connection.error(db, rc, sql: sql).parseError }
    }

    /// Binds UTF-8 bytes as TEXT (no `String` round trip: documents flow as bytes).
    public func bindText(utf8 bytes: [UInt8], at index: Int32) throws(ParseError) {
        let rc = bytes.withUnsafeBytes { raw in bindRawText(raw.baseAddress, raw.count, index) }
        guard rc == SQLITE_OK else { throw Connection.error(db, rc, sql: sql).parseError }
    }

    private func bindRawText(_ p: UnsafeRawPointer?, _ n: Int, _ index: Int32) -> Int32 {
        guard let p, n > 0 else { return sqlite3_bind_text(handle, index, "", 0, sqliteTransient) }
        return sqlite3_bind_text(handle, index, p.assumingMemoryBound(to: CChar.self), Int32(n), sqliteTransient)
    }

    /// Binds values to parameters 1…n.
    public func bind(_ values: [SQLiteValue]) throws(ParseError) {
        for (i, v) in values.enumerated() { try bind(v, at: Int32(i + 1)) }
    }

    // MARK: Stepping

    /// Advances: `true` when a row is available, `false` when done.
    /// - Throws: the step error mapped to `ParseError` (137 for unique violations).
    @discardableResult
    public func step() throws(ParseError) -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        let err = Connection.error(db, rc, sql: sql)
        sqlite3_reset(handle)
        throw err.parseError
    }

    /// Resets the statement to run again, keeping its bindings (rebind only what changes).
    public func rewind() {
        sqlite3_reset(handle)
    }

    /// Resets the statement and clears its bindings.
    public func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    // MARK: Columns (0-based)

    public var columnCount: Int32 { sqlite3_column_count(handle) }
    public func columnName(_ i: Int32) -> String { String(cString: sqlite3_column_name(handle, i)) }
    public func isNull(_ i: Int32) -> Bool { sqlite3_column_type(handle, i) == SQLITE_NULL }
    public func int64(_ i: Int32) -> Int64 { sqlite3_column_int64(handle, i) }
    public func double(_ i: Int32) -> Double { sqlite3_column_double(handle, i) }

    /// The column as text, nil when NULL.
    public func text(_ i: Int32) -> String? {
        guard let p = sqlite3_column_text(handle, i) else { return nil }
        let n = Int(sqlite3_column_bytes(handle, i))
        return String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self)
    }

    /// The column's bytes (TEXT as UTF-8, or BLOB), nil when NULL.
    public func bytes(_ i: Int32) -> [UInt8]? {
        if isNull(i) { return nil }
        return withBytes(i) { Array($0) }
    }

    /// Borrowed bytes of a TEXT/BLOB column, valid only inside `body` (no copy, no `String`).
    public func withBytes<R>(_ i: Int32, _ body: (UnsafeBufferPointer<UInt8>) throws(ParseError) -> R) throws(ParseError) -> R {
        let type = sqlite3_column_type(handle, i)
        let p: UnsafeRawPointer? = type == SQLITE_BLOB ? sqlite3_column_blob(handle, i) : sqlite3_column_text(handle, i).map { UnsafeRawPointer($0) }
        let n = Int(sqlite3_column_bytes(handle, i))
        let buf = UnsafeBufferPointer(start: p?.assumingMemoryBound(to: UInt8.self), count: p == nil ? 0 : n)
        return try body(buf)
    }

    /// Non-throwing variant of `withBytes`.
    public func withBytes<R>(_ i: Int32, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        let type = sqlite3_column_type(handle, i)
        let p: UnsafeRawPointer? = type == SQLITE_BLOB ? sqlite3_column_blob(handle, i) : sqlite3_column_text(handle, i).map { UnsafeRawPointer($0) }
        let n = Int(sqlite3_column_bytes(handle, i))
        return body(UnsafeBufferPointer(start: p?.assumingMemoryBound(to: UInt8.self), count: p == nil ? 0 : n))
    }

    /// The column as a `SQLiteValue` of its storage class.
    public func value(_ i: Int32) -> SQLiteValue {
        switch sqlite3_column_type(handle, i) {
        case SQLITE_INTEGER: return .integer(int64(i))
        case SQLITE_FLOAT: return .real(double(i))
        case SQLITE_TEXT: return .text(text(i) ?? "")
        case SQLITE_BLOB: return .blob(bytes(i) ?? [])
        default: return .null
        }
    }
}
