import MoonbaseCore
import MoonbaseCrypto
import MoonbaseJSON
import MoonbaseStore

/// Users, sessions, OAuth tokens and login throttling over the document store.
/// The REST endpoints (MoonbaseAPI) call these methods with plain values and render
/// the JSON objects they return, or the `ParseError` they throw, with Parse's codes.
///
/// Storage: users are `_User` rows (the argon2id hash in the internal field `_hashed_password`,
/// which no serialiser outputs); sessions are `_Session` rows holding only SHA-256 hashes of
/// their tokens (`sessionTokenHash`, and for OAuth `refreshTokenHash`), so the database holds
/// no usable secret. At start-up the service has the store prepare `_User` and `_Session`
/// (`AccountStore.prepareAccounts`); the store keeps usernames and lower-cased emails unique,
/// counts every user or session change in the auth epoch (see `SessionCache`), deletes a
/// user's sessions with the user whichever path deletes the row, and refuses (119) any write
/// that would store a `password` field in a `_User` row (a generic object path bypassing this
/// service).
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
    public let store: any AccountStore
    public let config: AuthConfig
    public let clock: any HostClock
    /// Failed-login counters (in memory; see `LoginThrottle`).
    public let throttle: LoginThrottle
    let cache: SessionCache

    /// Attaches the service to `store` and prepares `_User`/`_Session` (idempotent).
    /// - Throws: `ParseError` 1 when the schema cannot be prepared (e.g. duplicate usernames in
    ///   an existing database prevent the unique index).
    public init(store: any AccountStore, config: AuthConfig, clock: any HostClock) throws(ParseError) {
        self.store = store
        self.config = config
        self.clock = clock
        self.throttle = LoginThrottle(maxFailures: config.loginMaxFailures, windowMillis: config.loginWindowMillis, clock: clock)
        self.cache = SessionCache(capacity: config.sessionCacheCapacity)
        try store.prepareAccounts()
        try restoreThrottle()
    }

    /// Reads the open login-throttle windows back (and drops the closed ones).
    private func restoreThrottle() throws(ParseError) {
        guard throttle.isEnabled else { return }
        let oldest = clock.nowMillis() - throttle.windowMillis
        for w in try store.loginFailureWindows(closedAtOrBefore: oldest) {
            throttle.restore(w.key, start: w.start, failures: w.failures)
        }
    }

    /// Refuses (155) when a key is over the limit, counting the failures every host recorded:
    /// the saved windows are the truth (hosts sharing the database all write them), memory only
    /// stands in when the database cannot be read.
    func checkThrottle(_ keys: [String]) throws(ParseError) {
        guard throttle.isEnabled, !keys.isEmpty else { return }
        do throws(ParseError) {
            let saved = try store.loginFailures(keys: keys, now: clock.nowMillis(), windowMillis: throttle.windowMillis)
            throttle.adopt(keys, saved.map { ($0.key, $0.start, $0.failures) })
        } catch {
            Log.warn("login throttle read failed, checking this host's counts only: \(error.message)")
        }
        try throttle.check(keys)
    }

    /// Records a wrong password against `keys` in the database before the answer is sent, so a
    /// guess on any host counts on every host; counted in memory only if the write fails.
    func recordLoginFailure(_ keys: [String]) {
        guard throttle.isEnabled, !keys.isEmpty else { return }
        do throws(ParseError) {
            let saved = try store.recordLoginFailure(keys: keys, now: clock.nowMillis(), windowMillis: throttle.windowMillis)
            throttle.adopt(keys, saved.map { ($0.key, $0.start, $0.failures) })
        } catch {
            Log.warn("failed login not saved, counted on this host only: \(error.message)")
            throttle.recordFailure(keys)
        }
    }

    /// Writes the current window of each of `keys` (or removes it once it is gone), so the
    /// count survives a restart. A failure to write is logged: throttling stays in memory.
    func persistThrottle(_ keys: [String]) {
        guard throttle.isEnabled, !keys.isEmpty else { return }
        var windows: [LoginFailureWindow] = []
        var removed: [String] = []
        for k in keys {
            if let w = throttle.window(k) {
                windows.append(LoginFailureWindow(key: k, start: w.start, failures: w.failures))
            } else {
                removed.append(k)
            }
        }
        do throws(ParseError) {
            try store.saveLoginFailures(windows, removed: removed)
        } catch {
            Log.warn("login throttle state not saved: \(error.message)")
        }
    }

    // MARK: Lookups

    /// The user whose email is `email` (case-insensitive), as the master sees it, or nil.
    public func user(withEmail email: String) throws(ParseError) -> JSONObject? {
        guard let row = try store.user(email: email) else { return nil }
        return try row.json(for: .master)
    }

    /// A user by username, else by email (`username` may hold either).
    func userByLogin(_ login: String) throws(ParseError) -> StoredObject? {
        if let u = try store.user(username: login) { return u }
        return login.contains("@") ? try store.user(email: login) : nil
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
