import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// Accounts over SQLite. The tables, the unique email index and the triggers (auth epoch, the
/// user-deletion cascade, the plaintext-password refusal) are made by `Migrator`; the lookups
/// below spell their expressions exactly like the indexes, so SQLite uses them.
extension SQLiteDocumentStore: AccountStore {
    public func prepareAccounts() throws(ParseError) {
        try database.write { (tx) throws(ParseError) in
            try catalog.ensureClass("_User", in: tx)
            try catalog.ensureClass("_Session", in: tx)
            try catalog.setIndexes("_User", ["auth_username": ["fields": ["username": 1], "unique": true]], in: tx)
            try catalog.setIndexes("_Session", [
                "auth_token": ["fields": ["sessionTokenHash": 1], "unique": true],
                "auth_refresh": ["refreshTokenHash": 1],
                "auth_user": ["user": 1],
            ], in: tx)
        }
    }

    static let userByUsernameSQL =
        "SELECT \(StoredObject.columns) FROM \"_User\" WHERE \(Naming.fieldExpr("username", type: .string)) = ?"
    static let userByEmailSQL =
        "SELECT \(StoredObject.columns) FROM \"_User\" WHERE lower(json_extract(data,'$.email')) = lower(?)"
    static let sessionByTokenSQL =
        "SELECT \(StoredObject.columns) FROM \"_Session\" WHERE \(Naming.fieldExpr("sessionTokenHash", type: .string)) = ?"
    static let sessionByRefreshSQL =
        "SELECT \(StoredObject.columns) FROM \"_Session\" WHERE \(Naming.fieldExpr("refreshTokenHash", type: .string)) = ?"

    /// The first row `sql` selects (`StoredObject.columns`) with one text parameter.
    func first(_ sql: String, _ value: String, className: String) throws(ParseError) -> StoredObject? {
        try database.read { (c) throws(ParseError) -> StoredObject? in
            try c.withStatement(sql) { (s) throws(ParseError) -> StoredObject? in
                try s.bind(.text(value), at: 1)
                return try s.step() ? StoredObject(className: className, row: s) : nil
            }
        }
    }

    public func authEpoch() throws(ParseError) -> Int64 {
        try database.read { (c) throws(ParseError) -> Int64 in
            if case .integer(let n)? = try c.scalar("SELECT n FROM _mb_auth_epoch WHERE id = 1") { return n }
            return 0
        }
    }

    public func user(username: String) throws(ParseError) -> StoredObject? {
        try first(Self.userByUsernameSQL, username, className: "_User")
    }

    public func user(email: String) throws(ParseError) -> StoredObject? {
        try first(Self.userByEmailSQL, email, className: "_User")
    }

    public func session(tokenHash: String) throws(ParseError) -> StoredObject? {
        try first(Self.sessionByTokenSQL, tokenHash, className: "_Session")
    }

    public func session(refreshTokenHash: String) throws(ParseError) -> StoredObject? {
        try first(Self.sessionByRefreshSQL, refreshTokenHash, className: "_Session")
    }

    public func insertUser(fields: JSONObject, acl: JSONValue?) throws(ParseError) -> StoredObject {
        try database.write { (tx) throws(ParseError) in
            try tx.insert("_User", fields: fields, acl: acl, identity: .master, allowInternalFields: true)
        }
    }

    public func updateUser(_ userId: String, changes: JSONObject, identity: Identity) throws(ParseError) -> StoredObject {
        try database.write { (tx) throws(ParseError) in
            try tx.update("_User", objectId: userId, changes: changes, identity: identity, allowInternalFields: true)
        }
    }

    /// The sessions of one user (?: the user's objectId), as the `user` index spells it.
    static let sessionsOfUserFilter = "\(Naming.fieldExpr("user", type: .pointer)) = ?"

    public func deleteSessions(userId: String, except sessionId: String?) throws(ParseError) -> Int {
        var filter = Self.sessionsOfUserFilter
        var binds: [SQLiteValue] = [.text(userId)]
        if let sessionId {
            filter += " AND objectId != ?"
            binds.append(.text(sessionId))
        }
        return try deleteSessions(filter: filter, binds: binds)
    }

    public func deleteExpiredSessions(now: Int64) throws(ParseError) -> Int {
        let nowISO = ISO8601.format(millis: now)
        let filter = """
            \(Naming.fieldExpr("expiresAt", type: .date)) <= ?
            AND coalesce(\(Naming.fieldExpr("refreshExpiresAt", type: .date)), '') <= ?
            """
        return try deleteSessions(filter: filter, binds: [.text(nowISO), .text(nowISO)])
    }

    /// A set-based delete of sessions, recorded in the change feed like every delete.
    func deleteSessions(filter: String, binds: [SQLiteValue]) throws(ParseError) -> Int {
        try database.write { (tx) throws(ParseError) -> Int in
            try tx.feedBeforeDelete("_Session", filter: filter, binds: binds)
            return try tx.connection.run("DELETE FROM \"_Session\" WHERE " + filter, binds)
        }
    }

    public func loginFailureWindows(closedAtOrBefore oldest: Int64) throws(ParseError) -> [LoginFailureWindow] {
        try database.write { (tx) throws(ParseError) in
            try tx.connection.run("DELETE FROM _mb_login_failures WHERE start <= ?", [.integer(oldest)])
        }
        var out: [LoginFailureWindow] = []
        try database.read { (c) throws(ParseError) in
            try c.query("SELECT key, start, failures FROM _mb_login_failures") { (st) throws(ParseError) in
                if let key = st.text(0) { out.append(LoginFailureWindow(key: key, start: st.int64(1), failures: Int(st.int64(2)))) }
            }
        }
        return out
    }

    public func saveLoginFailures(_ windows: [LoginFailureWindow], removed: [String]) throws(ParseError) {
        try database.write { (tx) throws(ParseError) in
            for w in windows {
                try tx.connection.run("""
                    INSERT INTO _mb_login_failures(key, start, failures) VALUES (?1, ?2, ?3)
                    ON CONFLICT(key) DO UPDATE SET start = ?2, failures = ?3
                    """, [.text(w.key), .integer(w.start), .integer(Int64(w.failures))])
            }
            for k in removed {
                try tx.connection.run("DELETE FROM _mb_login_failures WHERE key = ?", [.text(k)])
            }
        }
    }

    public func loginFailures(keys: [String], now: Int64, windowMillis: Int64) throws(ParseError) -> [LoginFailureWindow] {
        var out: [LoginFailureWindow] = []
        try database.read { (c) throws(ParseError) in
            for k in keys.sorted() {
                try c.query("SELECT key, start, failures FROM _mb_login_failures WHERE key = ? AND start > ?",
                            [.text(k), .integer(now - windowMillis)]) { (st) throws(ParseError) in
                    if let key = st.text(0) { out.append(LoginFailureWindow(key: key, start: st.int64(1), failures: Int(st.int64(2)))) }
                }
            }
        }
        return out
    }

    /// The single writer makes each upsert atomic (SQLite binds `$N` like `?N`).
    public func recordLoginFailure(keys: [String], now: Int64, windowMillis: Int64) throws(ParseError) -> [LoginFailureWindow] {
        try database.write { (tx) throws(ParseError) -> [LoginFailureWindow] in
            var out: [LoginFailureWindow] = []
            for k in keys.sorted() {
                try tx.connection.query(LoginFailureSQL.count, [.text(k), .integer(now), .integer(now - windowMillis)]) { (st) throws(ParseError) in
                    if let key = st.text(0) { out.append(LoginFailureWindow(key: key, start: st.int64(1), failures: Int(st.int64(2)))) }
                }
            }
            return out
        }
    }
}

/// Counting one failed login, one statement for both backends ($1 key, $2 now, $3 the oldest
/// start still closed): a closed window restarts at now with 1, an open one counts one more.
enum LoginFailureSQL {
    static let count = """
        INSERT INTO _mb_login_failures(key, start, failures) VALUES ($1, $2, 1)
        ON CONFLICT (key) DO UPDATE SET
          start = CASE WHEN _mb_login_failures.start <= $3 THEN $2 ELSE _mb_login_failures.start END,
          failures = CASE WHEN _mb_login_failures.start <= $3 THEN 1 ELSE _mb_login_failures.failures + 1 END
        RETURNING key, start, failures
        """
}
