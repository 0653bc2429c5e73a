import MoonbaseCore
import MoonbasePostgres

/// The accounts' rules on PostgreSQL, kept by the database itself as the SQLite store's
/// triggers keep them, so they hold whichever path (REST, Cloud Code, a bulk write, another
/// host) writes a row:
/// - the auth epoch (`_mb_auth_epoch`) grows in the transaction of every update or delete of a
///   `_User` or `_Session` row: a session cache keyed by it is never stale on any host, since a
///   reader sees the new epoch exactly when it can see the change;
/// - deleting a user deletes their sessions;
/// - a `_User` row may never hold a `password` field (119; only the accounts service sets a
///   password, hashed, in `_hashed_password`);
/// - lower-cased emails are unique (137), so two hosts signing up one address cannot both win.
extension PostgresStore {
    /// The functions, triggers and the email index (idempotent; the class tables must exist).
    static let accountRules = """
        CREATE UNIQUE INDEX IF NOT EXISTS "_User__auth_email" ON "_User"(lower(data->>'email'));
        CREATE OR REPLACE FUNCTION _mb_auth_epoch_bump() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          UPDATE _mb_auth_epoch SET n = n + 1 WHERE id = 1;
          RETURN NULL;
        END $$;
        CREATE OR REPLACE FUNCTION _mb_user_sessions_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          DELETE FROM "_Session" WHERE data->'user'->>'objectId' IN (SELECT objectId FROM gone);
          RETURN NULL;
        END $$;
        CREATE OR REPLACE FUNCTION _mb_user_no_plain_password() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.data->>'password' IS NOT NULL THEN
            RAISE EXCEPTION '\(plaintextRefusal)';
          END IF;
          RETURN NEW;
        END $$;
        CREATE OR REPLACE TRIGGER "_User__auth_epoch" AFTER UPDATE OR DELETE ON "_User"
          FOR EACH STATEMENT EXECUTE FUNCTION _mb_auth_epoch_bump();
        CREATE OR REPLACE TRIGGER "_Session__auth_epoch" AFTER UPDATE OR DELETE ON "_Session"
          FOR EACH STATEMENT EXECUTE FUNCTION _mb_auth_epoch_bump();
        CREATE OR REPLACE TRIGGER "_User__auth_sessions" AFTER DELETE ON "_User"
          REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION _mb_user_sessions_delete();
        CREATE OR REPLACE TRIGGER "_User__auth_no_plain" BEFORE INSERT OR UPDATE ON "_User"
          FOR EACH ROW EXECUTE FUNCTION _mb_user_no_plain_password();
        """

    /// The refusal's message: `mb<code>:` makes `PGError` report it as that Parse code (119).
    static let plaintextRefusal =
        "mb119: a _User password can only be set through sign-up or the users endpoint (it is hashed there)"

    /// Creates the `_User` and `_Session` tables unless they exist and installs `accountRules`,
    /// under one advisory lock so hosts starting together install them once.
    public func installAccountRules() throws(ParseError) {
        try PostgresLayout.ensureClassTable("_User", pool: pool)
        try PostgresLayout.ensureClassTable("_Session", pool: pool)
        try pool.transaction(isolation: .readCommitted) { (tx) throws(ParseError) in
            try tx.connection.execute("SELECT pg_advisory_xact_lock($1::int, hashtext('accounts'))",
                                      [.integer(PostgresLayout.classLockSpace)])
            try tx.connection.executeScript(Self.accountRules)
        }
    }

    public func authEpoch() throws(ParseError) -> Int64 {
        try pool.withConnection { (c) throws(ParseError) in
            try c.execute("SELECT n FROM _mb_auth_epoch WHERE id = 1").scalar?.int64 ?? 0
        }
    }

    /// Failed logins are written as they happen (`saveLoginFailures`), so every host counts the
    /// same failures: no extra guesses by spreading them over hosts.
    public func loginFailureWindows(closedAtOrBefore oldest: Int64) throws(ParseError) -> [LoginFailureWindow] {
        try pool.withConnection { (c) throws(ParseError) in
            try c.execute("DELETE FROM _mb_login_failures WHERE start <= $1", [.integer(oldest)])
            return try c.execute("SELECT key, start, failures FROM _mb_login_failures ORDER BY key COLLATE \"C\"").rows.compactMap { r in
                guard let key = r[0].string, let start = r[1].int64, let n = r[2].int64 else { return nil }
                return LoginFailureWindow(key: key, start: start, failures: Int(n))
            }
        }
    }

    public func saveLoginFailures(_ windows: [LoginFailureWindow], removed: [String]) throws(ParseError) {
        try pool.transaction(isolation: .readCommitted) { (tx) throws(ParseError) in
            for w in windows.sorted(by: { $0.key < $1.key }) {
                try tx.connection.execute("""
                    INSERT INTO _mb_login_failures(key, start, failures) VALUES ($1, $2, $3)
                    ON CONFLICT (key) DO UPDATE SET start = excluded.start, failures = excluded.failures
                    """, [.text(w.key), .integer(w.start), .integer(Int64(w.failures))])
            }
            for k in removed {
                try tx.connection.execute("DELETE FROM _mb_login_failures WHERE key = $1", [.text(k)])
            }
        }
    }

    public func loginFailures(keys: [String], now: Int64, windowMillis: Int64) throws(ParseError) -> [LoginFailureWindow] {
        try pool.withConnection { (c) throws(ParseError) -> [LoginFailureWindow] in
            var out: [LoginFailureWindow] = []
            for k in keys.sorted() {
                let r = try c.execute("SELECT key, start, failures FROM _mb_login_failures WHERE key = $1 AND start > $2",
                                      [.text(k), .integer(now - windowMillis)])
                if let w = r.rows.first.flatMap(Self.loginWindow) { out.append(w) }
            }
            return out
        }
    }

    /// One upsert per key: PostgreSQL applies each under the row's lock, so hosts counting the
    /// same key at once never lose a failure. Keys in order, so two such calls lock alike.
    public func recordLoginFailure(keys: [String], now: Int64, windowMillis: Int64) throws(ParseError) -> [LoginFailureWindow] {
        try pool.transaction(isolation: .readCommitted) { (tx) throws(ParseError) -> [LoginFailureWindow] in
            var out: [LoginFailureWindow] = []
            for k in keys.sorted() {
                let r = try tx.connection.execute(LoginFailureSQL.count, [.text(k), .integer(now), .integer(now - windowMillis)])
                if let w = r.rows.first.flatMap(Self.loginWindow) { out.append(w) }
            }
            return out
        }
    }

    static func loginWindow(_ r: PGRow) -> LoginFailureWindow? {
        guard let key = r[0].string, let start = r[1].int64, let n = r[2].int64 else { return nil }
        return LoginFailureWindow(key: key, start: start, failures: Int(n))
    }
}
