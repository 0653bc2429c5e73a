import CSQLite
import MoonbaseCore

#if canImport(Glibc)
import Glibc
#endif

/// An error reported by SQLite: its extended result code, message and the SQL that failed.
///
/// GRDB's `DatabaseError` shape. It stays inside the storage modules: every public entry point
/// maps it to a `ParseError` with `parseError` (the module edge), keeping the SQLite details in
/// `ParseError.underlying`, which is logged and never sent to a client.
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    /// Extended result code (`sqlite3_extended_errcode`), e.g. 2067 = `SQLITE_CONSTRAINT_UNIQUE`.
    public var code: Int32
    public var message: String
    public var sql: String?
    /// The OS error behind an I/O error (`sqlite3_system_errno`), 0 if none.
    public var systemErrno: Int32

    public init(code: Int32, message: String, sql: String? = nil, systemErrno: Int32 = 0) {
        self.code = code
        self.message = message
        self.sql = sql
        self.systemErrno = systemErrno
    }

    /// The disk (or the database's size limit) is full: `SQLITE_FULL`, or an I/O error whose
    /// cause is `ENOSPC`/`EDQUOT` (a WAL append can fail that way).
    public var isDiskFull: Bool {
        primaryCode == 13 /* SQLITE_FULL */
            || (primaryCode == 10 /* SQLITE_IOERR */ && (systemErrno == ENOSPC || systemErrno == EDQUOT))
    }

    /// What a client is told when a write fails for lack of space (status 503: writes resume
    /// by themselves once space is freed, reads keep working).
    public static let diskFullMessage = "database or disk is full: writes are refused until space is freed"

    /// The primary result code (low byte of the extended code).
    public var primaryCode: Int32 { code & 0xFF }

    public var isUniqueViolation: Bool {
        code == 2067 /* SQLITE_CONSTRAINT_UNIQUE */ || code == 1555 /* SQLITE_CONSTRAINT_PRIMARYKEY */
    }

    public var description: String {
        var s = "SQLite error \(code): \(message)"
        if let sql { s += " in <\(sql)>" }
        return s
    }

    /// Maps to the Parse error a client sees:
    /// - unique / primary key constraint → 137 "duplicate value";
    /// - our SQL functions' errors carry their Parse code as a `mb<code>:` message prefix
    ///   (`regexp` → 102 invalid query, array operators on a non-array → 111);
    /// - disk full → 1 "database or disk is full…" with status 503;
    /// - busy / locked → 1 "database busy"; anything else → 1 internal error.
    public var parseError: ParseError {
        if isUniqueViolation {
            return ParseError(.duplicateValue, "A duplicate value for a field with unique values was provided",
                              underlying: description)
        }
        if isDiskFull {
            return ParseError(.internalError, Self.diskFullMessage, underlying: description,
                              headers: [("Retry-After", "10")], status: 503)
        }
        if let (pcode, text) = Self.functionError(message) {
            return ParseError(ParseErrorCode(pcode), text, underlying: description)
        }
        switch primaryCode {
        case SQLITE_BUSY, SQLITE_LOCKED:
            return ParseError(.internalError, "database busy", underlying: description)
        default:
            return ParseError(.internalError, "internal error", underlying: description)
        }
    }

    /// Parses `mb<code>: text` messages raised by our own SQL functions.
    static func functionError(_ message: String) -> (Int, String)? {
        guard message.hasPrefix("mb") else { return nil }
        let rest = message.dropFirst(2)
        guard let colon = rest.firstIndex(of: ":"), let code = Int(rest[..<colon]) else { return nil }
        return (code, String(rest[rest.index(after: colon)...].drop { $0 == " " }))
    }
}
