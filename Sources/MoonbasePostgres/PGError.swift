import MoonbaseCore

/// An error reported by PostgreSQL or libpq: its SQLSTATE, message and the SQL that failed.
///
/// Like `SQLiteError`, it stays inside the storage modules: `parseError` maps it to what a
/// client sees, with the PostgreSQL details in `ParseError.underlying` (logged, never sent).
/// Codes: https://www.postgresql.org/docs/15/errcodes-appendix.html
public struct PGError: Error, Sendable, CustomStringConvertible {
    /// Five-character SQLSTATE; empty when libpq failed without one (the connection broke).
    public var sqlState: String
    /// PostgreSQL's primary message (or libpq's message).
    public var message: String
    public var sql: String?
    /// True when the connection is unusable after this error.
    public var connectionLost: Bool

    public init(sqlState: String, message: String, sql: String? = nil, connectionLost: Bool = false) {
        self.sqlState = sqlState
        self.message = message
        self.sql = sql
        self.connectionLost = connectionLost
    }

    /// 23505 `unique_violation`.
    public var isUniqueViolation: Bool { sqlState == "23505" }

    /// 40001 `serialization_failure` or 40P01 `deadlock_detected`: the transaction lost a race
    /// and succeeds when run again from the start.
    public var isRetryable: Bool { sqlState == "40001" || sqlState == "40P01" }

    /// Class 08 (connection exception) or an administrator's shutdown/termination (57P01-57P03),
    /// or libpq reporting the connection bad.
    public var isConnectionLoss: Bool {
        connectionLost || sqlState.hasPrefix("08") || ["57P01", "57P02", "57P03"].contains(sqlState)
    }

    public var description: String {
        var s = "PostgreSQL error \(sqlState.isEmpty ? "(no SQLSTATE)" : sqlState): \(message)"
        if let sql { s += " in <\(sql)>" }
        return s
    }

    /// What a client is told when a transaction lost its race more often than it is retried.
    public static let conflictMessage = "transaction conflict: too many concurrent writes, try again"
    /// What a client is told when the database cannot be reached.
    public static let connectionLostMessage = "database connection lost"

    /// Maps to the Parse error a client sees:
    /// - unique violation → 137 "duplicate value";
    /// - serialization failure / deadlock → 1 (retryable: `PGPool.transaction` retries it and
    ///   answers 141 when the retries run out);
    /// - connection loss → 1 "database connection lost" with status 503 and `Retry-After`;
    /// - `mb<code>: text` raised by one of our triggers → that code and text;
    /// - anything else → 1 with PostgreSQL's message.
    public var parseError: ParseError {
        if isUniqueViolation {
            return ParseError(.duplicateValue, "A duplicate value for a field with unique values was provided",
                              underlying: description)
        }
        if isRetryable {
            return ParseError(.internalError, "transaction conflict (\(sqlState)): \(message)", underlying: description)
        }
        if isConnectionLoss {
            return ParseError(.internalError, Self.connectionLostMessage, underlying: description,
                              headers: [("Retry-After", "1")], status: 503)
        }
        if sqlState == "P0001", let (code, text) = Self.raisedError(message) {
            return ParseError(ParseErrorCode(code), text, underlying: description)
        }
        return ParseError(.internalError, message, underlying: description)
    }

    /// Parses `mb<code>: text`, the message our own triggers raise (`RAISE EXCEPTION`, SQLSTATE
    /// P0001) to refuse a write with that Parse code, as the SQLite store's triggers do.
    static func raisedError(_ message: String) -> (Int, String)? {
        guard message.hasPrefix("mb") else { return nil }
        let rest = message.dropFirst(2)
        guard let colon = rest.firstIndex(of: ":"), let code = Int(rest[..<colon]) else { return nil }
        return (code, String(rest[rest.index(after: colon)...].drop { $0 == " " }))
    }
}
