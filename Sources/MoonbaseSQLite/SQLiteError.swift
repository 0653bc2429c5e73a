import CSQLite
import MoonbaseCore

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

    public init(code: Int32, message: String, sql: String? = nil) {
        self.code = code
        self.message = message
        self.sql = sql
    }

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
    /// - busy / locked → 1 "database busy"; anything else → 1 internal error.
    public var parseError: ParseError {
        if isUniqueViolation {
            return ParseError(.duplicateValue, "A duplicate value for a field with unique values was provided",
                              underlying: description)
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
