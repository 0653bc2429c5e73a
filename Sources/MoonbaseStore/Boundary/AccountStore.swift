import MoonbaseCore
import MoonbaseJSON

/// One login-throttle window kept across restarts: `failures` failed logins for `key`
/// (`ip:…`, `user:…`, `name:…`) since `start` (ms).
public struct LoginFailureWindow: Sendable, Equatable {
    public var key: String
    public var start: Int64
    public var failures: Int

    public init(key: String, start: Int64, failures: Int) {
        self.key = key
        self.start = start
        self.failures = failures
    }
}

/// What the accounts service (MoonbaseAuth) needs beyond plain documents: users and sessions
/// looked up by their unique keys, writes of the internal password-hash field, session
/// revocation, the auth epoch, and the saved login-failure windows.
///
/// Contract for every implementation:
/// - `_User` and `_Session` are ordinary classes (readable through `DocumentStore`); the store
///   keeps usernames and lower-cased emails unique, and refuses (119) any `_User` write that
///   would store a `password` field;
/// - the auth epoch grows on every committed change to a `_User` or `_Session` row, by any
///   path (so a cache keyed by it is never stale); deleting a user deletes their sessions;
/// - calls made inside `transaction` join it, like every store call.
public protocol AccountStore: DocumentStore {
    /// Registers `_User` and `_Session` and declares their indexes (unique username and session
    /// token hash, refresh token hash, session user). Idempotent; called once at start-up.
    /// - Throws: 1 when an existing database holds duplicates the unique indexes refuse.
    func prepareAccounts() throws(ParseError)
    /// The current auth epoch.
    func authEpoch() throws(ParseError) -> Int64
    /// The user whose `username` is exactly `username`, or nil.
    func user(username: String) throws(ParseError) -> StoredObject?
    /// The user whose email equals `email` case-insensitively, or nil.
    func user(email: String) throws(ParseError) -> StoredObject?
    /// The session whose `sessionTokenHash` is `tokenHash`, or nil.
    func session(tokenHash: String) throws(ParseError) -> StoredObject?
    /// The session whose `refreshTokenHash` is `refreshTokenHash`, or nil.
    func session(refreshTokenHash: String) throws(ParseError) -> StoredObject?
    /// Inserts a `_User` as the master; `fields` may hold internal (`_`-prefixed) fields such as
    /// `_hashed_password`, so the caller must have filtered the client's input.
    func insertUser(fields: JSONObject, acl: JSONValue?) throws(ParseError) -> StoredObject
    /// Updates a `_User` for `identity` (ACL and CLP apply); `changes` may hold internal fields.
    func updateUser(_ userId: String, changes: JSONObject, identity: Identity) throws(ParseError) -> StoredObject
    /// Deletes the sessions of `userId`, except `sessionId` when given. Returns how many.
    func deleteSessions(userId: String, except sessionId: String?) throws(ParseError) -> Int
    /// Deletes the sessions whose token and refresh token (if any) expired at or before `now`
    /// (ms). Returns how many.
    func deleteExpiredSessions(now: Int64) throws(ParseError) -> Int
    /// Forgets the saved login-failure windows that started at or before `closedAtOrBefore`
    /// and returns the others.
    func loginFailureWindows(closedAtOrBefore: Int64) throws(ParseError) -> [LoginFailureWindow]
    /// Saves `windows` (replacing a key's earlier one) and forgets `removed`, in one transaction.
    func saveLoginFailures(_ windows: [LoginFailureWindow], removed: [String]) throws(ParseError)
    /// The saved windows of `keys` still open at `now` (started less than `windowMillis` ago).
    func loginFailures(keys: [String], now: Int64, windowMillis: Int64) throws(ParseError) -> [LoginFailureWindow]
    /// Counts one failed login against each of `keys` at `now`, atomically against concurrent
    /// callers on any host (a key whose window closed starts a new one at `now` with 1), and
    /// returns the keys' windows after the count.
    func recordLoginFailure(keys: [String], now: Int64, windowMillis: Int64) throws(ParseError) -> [LoginFailureWindow]
}
