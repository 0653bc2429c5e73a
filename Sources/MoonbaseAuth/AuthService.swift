import MoonbaseCore
import MoonbaseCrypto
import MoonbaseJSON
import MoonbaseSQLite
import MoonbaseStore

/// Users, sessions, OAuth tokens and login throttling over the document store.
/// The REST endpoints (MoonbaseAPI) call these methods with plain values and render
/// the JSON objects they return, or the `ParseError` they throw, with Parse's codes.
///
/// Storage: users are `_User` rows (the argon2id hash in the internal field `_hashed_password`,
/// which no serialiser outputs); sessions are `_Session` rows holding only SHA-256 hashes of
/// their tokens (`sessionTokenHash`, and for OAuth `refreshTokenHash`), so the database holds
/// no usable secret. At start-up the service declares its indexes through the store (unique
/// `username`, `sessionTokenHash`, plus `refreshTokenHash` and `user`), a unique index on the
/// lower-cased email (SQLite `lower`, for case-insensitive matching), the `_mb_auth_epoch`
/// counter with its triggers (see `SessionCache`), a trigger deleting a user's sessions with
/// the user, whichever path deletes the row, and triggers refusing (119) any write that would
/// store a `password` field in a `_User` row (a generic object path bypassing this service).
///
/// Threads: password hashing and verification (about 14 ms of CPU each) run on the calling
/// thread; the API layer calls `signUp`, `logIn`, `tokenGrant`, `updateUser` and
/// `verifyPassword` on a worker, never on an HTTP I/O thread. Hashing happens before the write
/// transaction opens, so the single writer is never held for it.
///
/// Thread-safety: `Sendable`; every method may be called from any thread.
///
/// ```swift
/// let auth = try AuthService(store: store, config: AuthConfig(appId: "moonbase"), clock: SystemClock())
/// let (user, token) = try auth.signUp(body: ["username": "ann", "password": "pw"], ip: "10.0.0.1")
/// let session = try auth.resolveSession(token)   // on every authenticated request
/// ```
public final class AuthService: Sendable {
    public let store: SQLiteDocumentStore
    public let config: AuthConfig
    public let clock: any HostClock
    /// Failed-login counters (in memory; see `LoginThrottle`).
    public let throttle: LoginThrottle
    let cache: SessionCache

    var database: Database { store.database }

    /// Attaches the service to `store` and prepares `_User`/`_Session` (idempotent).
    /// - Throws: `ParseError` 1 when the schema cannot be prepared (e.g. duplicate usernames in
    ///   an existing database prevent the unique index).
    public init(store: SQLiteDocumentStore, config: AuthConfig, clock: any HostClock) throws(ParseError) {
        self.store = store
        self.config = config
        self.clock = clock
        self.throttle = LoginThrottle(maxFailures: config.loginMaxFailures, windowMillis: config.loginWindowMillis, clock: clock)
        self.cache = SessionCache(capacity: config.sessionCacheCapacity)
        try prepareSchema()
        try restoreThrottle()
    }

    /// Reads the open login-throttle windows back (and drops the closed ones).
    private func restoreThrottle() throws(ParseError) {
        guard throttle.isEnabled else { return }
        let oldest = clock.nowMillis() - throttle.windowMillis
        try database.write { (tx) throws(ParseError) in
            try tx.connection.run("DELETE FROM _mb_login_failures WHERE start <= ?", [.integer(oldest)])
        }
        try database.read { (c) throws(ParseError) in
            try c.query("SELECT key, start, failures FROM _mb_login_failures") { (st) throws(ParseError) in
                if let key = st.text(0) { throttle.restore(key, start: st.int64(1), failures: Int(st.int64(2))) }
            }
        }
    }

    /// Writes the current window of each of `keys` (or removes it once it is gone), so the
    /// count survives a restart. A failure to write is logged: throttling stays in memory.
    func persistThrottle(_ keys: [String]) {
        guard throttle.isEnabled, !keys.isEmpty else { return }
        do throws(ParseError) {
            try database.write { (tx) throws(ParseError) in
                for k in keys {
                    if let w = throttle.window(k) {
                        try tx.connection.run("""
                            INSERT INTO _mb_login_failures(key, start, failures) VALUES (?1, ?2, ?3)
                            ON CONFLICT(key) DO UPDATE SET start = ?2, failures = ?3
                            """, [.text(k), .integer(w.start), .integer(Int64(w.failures))])
                    } else {
                        try tx.connection.run("DELETE FROM _mb_login_failures WHERE key = ?", [.text(k)])
                    }
                }
            }
        } catch {
            Log.warn("login throttle state not saved: \(error.message)")
        }
    }

    private func prepareSchema() throws(ParseError) {
        try database.write { (tx) throws(ParseError) in
            let catalog = store.catalog
            try catalog.ensureClass("_User", in: tx)
            try catalog.ensureClass("_Session", in: tx)
            try catalog.setIndexes("_User", ["auth_username": ["fields": ["username": 1], "unique": true]], in: tx)
            try catalog.setIndexes("_Session", [
                "auth_token": ["fields": ["sessionTokenHash": 1], "unique": true],
                "auth_refresh": ["refreshTokenHash": 1],
                "auth_user": ["user": 1],
            ], in: tx)
            try tx.connection.execute(Self.authDDL)
        }
    }

    /// DDL owned by this module (constant text; no request value reaches it).
    static let authDDL = """
        CREATE UNIQUE INDEX IF NOT EXISTS "_User__auth_email" ON "_User"(lower(json_extract(data,'$.email')));
        CREATE TABLE IF NOT EXISTS _mb_auth_epoch(id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS _mb_login_failures(key TEXT PRIMARY KEY, start INTEGER NOT NULL,
          failures INTEGER NOT NULL);
        INSERT OR IGNORE INTO _mb_auth_epoch(id, n) VALUES (1, 0);
        CREATE TRIGGER IF NOT EXISTS "_User__auth_epoch_u" AFTER UPDATE ON "_User" BEGIN
          UPDATE _mb_auth_epoch SET n = n + 1 WHERE id = 1;
        END;
        CREATE TRIGGER IF NOT EXISTS "_User__auth_epoch_d" AFTER DELETE ON "_User" BEGIN
          UPDATE _mb_auth_epoch SET n = n + 1 WHERE id = 1;
          DELETE FROM "_Session" WHERE json_extract(data,'$.user.objectId') = old.objectId;
        END;
        CREATE TRIGGER IF NOT EXISTS "_Session__auth_epoch_u" AFTER UPDATE ON "_Session" BEGIN
          UPDATE _mb_auth_epoch SET n = n + 1 WHERE id = 1;
        END;
        CREATE TRIGGER IF NOT EXISTS "_Session__auth_epoch_d" AFTER DELETE ON "_Session" BEGIN
          UPDATE _mb_auth_epoch SET n = n + 1 WHERE id = 1;
        END;
        CREATE TRIGGER IF NOT EXISTS "_User__auth_no_plain_i" BEFORE INSERT ON "_User"
          WHEN json_extract(new.data,'$.password') IS NOT NULL BEGIN
          SELECT RAISE(ABORT, '\(plaintextRefusal)');
        END;
        CREATE TRIGGER IF NOT EXISTS "_User__auth_no_plain_u" BEFORE UPDATE OF data ON "_User"
          WHEN json_extract(new.data,'$.password') IS NOT NULL BEGIN
          SELECT RAISE(ABORT, '\(plaintextRefusal)');
        END;
        """

    /// The backstop's message: `mb<code>:` makes the store report it as that Parse code (119).
    /// Generic object paths (`/parse/classes/_User`, Lua `db.*`) would otherwise store a
    /// `password` field as given; only this service may set a password, hashed.
    static let plaintextRefusal =
        "mb119: a _User password can only be set through sign-up or the users endpoint (it is hashed there)"

    // MARK: Lookups (SQL spelled exactly like the index expressions, so SQLite uses them)

    static let userByUsernameSQL =
        "SELECT \(StoredObject.columns) FROM \"_User\" WHERE \(Naming.fieldExpr("username", type: .string)) = ?"
    static let userByEmailSQL =
        "SELECT \(StoredObject.columns) FROM \"_User\" WHERE lower(json_extract(data,'$.email')) = lower(?)"
    static let sessionByTokenSQL =
        "SELECT \(StoredObject.columns) FROM \"_Session\" WHERE \(Naming.fieldExpr("sessionTokenHash", type: .string)) = ?"
    static let sessionByRefreshSQL =
        "SELECT \(StoredObject.columns) FROM \"_Session\" WHERE \(Naming.fieldExpr("refreshTokenHash", type: .string)) = ?"
    static let epochSQL = "SELECT n FROM _mb_auth_epoch WHERE id = 1"

    /// The first row `sql` selects (`StoredObject.columns`) with one text parameter.
    static func first(_ sql: String, _ value: String, className: String, on c: Connection) throws(ParseError) -> StoredObject? {
        try c.withStatement(sql) { (s) throws(ParseError) -> StoredObject? in
            try s.bind(.text(value), at: 1)
            return try s.step() ? StoredObject(className: className, row: s) : nil
        }
    }

    func userByUsername(_ username: String, on c: Connection) throws(ParseError) -> StoredObject? {
        try Self.first(Self.userByUsernameSQL, username, className: "_User", on: c)
    }

    func userByEmail(_ email: String, on c: Connection) throws(ParseError) -> StoredObject? {
        try Self.first(Self.userByEmailSQL, email, className: "_User", on: c)
    }

    /// The user whose email is `email` (case-insensitive), as the master sees it, or nil.
    public func user(withEmail email: String) throws(ParseError) -> JSONObject? {
        guard let row = try database.read({ (c) throws(ParseError) -> StoredObject? in try userByEmail(email, on: c) }) else {
            return nil
        }
        return try row.json(for: .master)
    }

    /// A user by username, else by email (`username` may hold either).
    func userByLogin(_ login: String, on c: Connection) throws(ParseError) -> StoredObject? {
        if let u = try userByUsername(login, on: c) { return u }
        return login.contains("@") ? try userByEmail(login, on: c) : nil
    }

    func epoch(on c: Connection) throws(ParseError) -> Int64 {
        if case .integer(let n)? = try c.scalar(Self.epochSQL) { return n }
        return 0
    }

    // MARK: Shared helpers

    /// The stored argon2id hash of a user row, if it has one.
    static func passwordHash(of user: StoredObject) throws(ParseError) -> String? {
        try user.fields()["_hashed_password"]?.stringValue
    }

    /// A hash verified when the login names no user, so an unknown name costs the same time as a
    /// wrong password (no account enumeration by timing). Made once, from a random password.
    static let decoyHash: String = Password.hash(Random.hex(16))

    /// Checks `password` against `user` (or the decoy when nil). Runs argon2id: call on a worker.
    static func verify(_ password: String, user: StoredObject?) throws(ParseError) -> Bool {
        guard let user else {
            _ = Password.verify(password, against: decoyHash)
            return false
        }
        guard let hash = try passwordHash(of: user) else {
            _ = Password.verify(password, against: decoyHash)
            return false
        }
        return Password.verify(password, against: hash)
    }

    static let invalidCredentials = ParseError(.objectNotFound, "Invalid username/password.")
    static let invalidSession = ParseError(.invalidSessionToken, "Invalid session token")

    func iso(_ millis: Int64) -> JSONValue { .string(ISO8601.format(millis: millis)) }
    func dateValue(_ millis: Int64) -> JSONValue { ["__type": "Date", "iso": iso(millis)] }
}

extension ParseErrorCode {
    /// 125: the email address is malformed (Parse's `INVALID_EMAIL_ADDRESS`).
    public static let invalidEmailAddress = ParseErrorCode(125)
}
