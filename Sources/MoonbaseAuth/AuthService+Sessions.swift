import MoonbaseCore
import MoonbaseCrypto
import MoonbaseJSON
import MoonbaseStore

/// A session made by `AuthService.createSession`: the tokens are returned here once and stored
/// only as hashes.
public struct IssuedSession: Sendable {
    public var sessionId: String
    public var sessionToken: String
    public var expiresAt: Int64
    /// OAuth sessions only.
    public var refreshToken: String?
    public var refreshExpiresAt: Int64?
}

/// How a session was made (`_Session.createdWith.action`).
public enum SessionAction: String, Sendable {
    case signup, login, oauth
}

extension AuthService {
    // MARK: Creating

    /// Inserts a `_Session` row for `userId` (joining the caller's transaction, if any) and
    /// returns its fresh tokens.
    ///
    /// Row fields: `user` (Pointer `_User`), `sessionTokenHash`, `expiresAt` (Date), `createdWith`
    /// `{action, authProvider: "password"}`, `installationId` when given, and for OAuth
    /// `refreshTokenHash` + `refreshExpiresAt`. ACL: the user may read and delete it (the class
    /// itself stays master-only).
    public func createSession(userId: String, action: SessionAction,
                              installationId: String? = nil) throws(ParseError) -> IssuedSession {
        let now = clock.nowMillis()
        let oauth = action == .oauth
        let token = SessionToken.generate()
        let expiresAt = now + (oauth ? config.accessTokenLifetimeMillis : config.sessionLifetimeMillis)
        var fields: JSONObject = [
            "user": ["__type": "Pointer", "className": "_User", "objectId": .string(userId)],
            "sessionTokenHash": .string(TokenHash.sha256Hex(token)),
            "expiresAt": dateValue(expiresAt),
            "createdWith": ["action": .string(action.rawValue), "authProvider": "password"],
        ]
        if let installationId { fields["installationId"] = .string(installationId) }
        var refresh: String?
        var refreshExpiresAt: Int64?
        if oauth {
            let r = SessionToken.generate(prefix: "rt:")
            refresh = r
            refreshExpiresAt = now + config.refreshTokenLifetimeMillis
            fields["refreshTokenHash"] = .string(TokenHash.sha256Hex(r))
            fields["refreshExpiresAt"] = dateValue(now + config.refreshTokenLifetimeMillis)
        }
        let acl: JSONValue = [userId: ["read": true, "write": true]]
        let row = try store.insert("_Session", fields: fields, acl: acl, identity: .master)
        return IssuedSession(sessionId: row.objectId, sessionToken: token, expiresAt: expiresAt,
                             refreshToken: refresh, refreshExpiresAt: refreshExpiresAt)
    }

    // MARK: Resolving (every authenticated request)

    /// The session a token (from `X-Parse-Session-Token` or `Authorization: Bearer`) belongs to,
    /// or nil when it is unknown, expired, or its user is gone (the API layer answers 209).
    ///
    /// Cost: a hit reads one counter row and a dictionary entry; a miss adds two indexed lookups
    /// (session by token hash, user by objectId) and parses the user. See `SessionCache` for why
    /// a cached answer is never stale.
    public func resolveSession(_ token: String) throws(ParseError) -> ResolvedSession? {
        guard !token.isEmpty, token.utf8.count <= 512 else { return nil }
        let hash = TokenHash.sha256Hex(token)
        let now = clock.nowMillis()
        // Inside a write the reads see uncommitted rows that may yet roll back: bypass the cache.
        let useCache = !store.inTransaction
        // The epoch is read before the rows, so an answer cached under it is never newer data
        // under an older epoch.
        let epoch = try store.authEpoch()
        if useCache, let hit = cache.lookup(hash, epoch: epoch, now: now) { return hit }
        guard let found = try Self.sessionRow(store.session(tokenHash: hash)), found.expiresAt > now,
              let user = try store.fetchRaw("_User", objectId: found.userId) else { return nil }
        let resolved = ResolvedSession(userId: found.userId, user: try user.json(for: .user(found.userId)),
                                       sessionId: found.row.objectId, expiresAt: found.expiresAt)
        if useCache { cache.store(hash, resolved, epoch: epoch) }
        return resolved
    }

    /// A session row's parts that matter here.
    struct SessionRow {
        var row: StoredObject
        var fields: JSONObject
        var userId: String
        var expiresAt: Int64
    }

    static func sessionRow(_ row: StoredObject?) throws(ParseError) -> SessionRow? {
        guard let row else { return nil }
        let f = try row.fields()
        guard let uid = f["user"]?["objectId"]?.stringValue,
              let iso = f["expiresAt"]?["iso"]?.stringValue, let exp = ISO8601.parse(iso) else { return nil }
        return SessionRow(row: row, fields: f, userId: uid, expiresAt: exp)
    }

    /// `GET /parse/users/me`: the user as they see themself, plus `sessionToken` (Parse's shape).
    /// - Throws: 209 for an unknown or expired token.
    public func me(_ token: String) throws(ParseError) -> JSONObject {
        guard let s = try resolveSession(token) else { throw Self.invalidSession }
        var user = s.user
        user["sessionToken"] = .string(token)
        return user
    }

    // MARK: Revoking

    /// `POST /parse/logout`: deletes the token's session (and with it an OAuth refresh token).
    /// - Throws: 209 when the token matches no session.
    public func logOut(_ token: String) throws(ParseError) {
        let hash = TokenHash.sha256Hex(token)
        let deleted = try store.transaction { () throws(ParseError) -> Bool in
            guard let s = try store.session(tokenHash: hash) else { return false }
            try store.delete("_Session", objectId: s.objectId, identity: .master)
            return true
        }
        cache.remove(hash)
        guard deleted else { throw Self.invalidSession }
    }

    /// Deletes every session of `userId` except `sessionId` (a password change keeps the session
    /// that made it), joining the caller's transaction if any. Returns how many were deleted.
    @discardableResult
    public func revokeSessions(userId: String, except sessionId: String? = nil) throws(ParseError) -> Int {
        try store.deleteSessions(userId: userId, except: sessionId)
    }

    /// Deletes all sessions of `userId` (the user-deletion cascade, for the API layer's object
    /// service to call around its `beforeDelete` triggers, in its transaction).
    @discardableResult
    public func deleteUserSessions(_ userId: String) throws(ParseError) -> Int {
        try store.deleteSessions(userId: userId, except: nil)
    }

    /// Deletes sessions whose token and refresh token have both expired (housekeeping, e.g. from
    /// a daily job). Returns how many were deleted.
    @discardableResult
    public func purgeExpiredSessions() throws(ParseError) -> Int {
        try store.deleteExpiredSessions(now: clock.nowMillis())
    }

    /// Empties the session cache (tests, operations). Correctness never depends on calling it.
    public func clearSessionCache() { cache.removeAll() }
}
