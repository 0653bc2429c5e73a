import MoonbaseCore
import MoonbaseCrypto
import MoonbaseJSON
import MoonbaseSQLite
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

    /// Inserts a `_Session` row for `userId` in `tx` and returns its fresh tokens.
    ///
    /// Row fields: `user` (Pointer `_User`), `sessionTokenHash`, `expiresAt` (Date), `createdWith`
    /// `{action, authProvider: "password"}`, `installationId` when given, and for OAuth
    /// `refreshTokenHash` + `refreshExpiresAt`. ACL: the user may read and delete it (the class
    /// itself stays master-only).
    public func createSession(userId: String, action: SessionAction, installationId: String? = nil,
                              in tx: WriteTransaction) throws(ParseError) -> IssuedSession {
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
        let row = try tx.insert("_Session", fields: fields, acl: acl, identity: .master)
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
        let useCache = database.currentTransaction == nil
        return try database.read { (c) throws(ParseError) -> ResolvedSession? in
            let epoch = try self.epoch(on: c)
            if useCache, let hit = cache.lookup(hash, epoch: epoch, now: now) { return hit }
            guard let found = try sessionRow(tokenHash: hash, on: c), found.expiresAt > now,
                  let user = try c.fetchRaw("_User", objectId: found.userId) else { return nil }
            let resolved = ResolvedSession(userId: found.userId, user: try user.json(for: .user(found.userId)),
                                           sessionId: found.row.objectId, expiresAt: found.expiresAt)
            if useCache { cache.store(hash, resolved, epoch: epoch) }
            return resolved
        }
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

    func sessionRow(tokenHash: String, on c: Connection) throws(ParseError) -> SessionRow? {
        try Self.sessionRow(Self.first(Self.sessionByTokenSQL, tokenHash, className: "_Session", on: c))
    }

    func sessionRow(refreshHash: String, on c: Connection) throws(ParseError) -> SessionRow? {
        try Self.sessionRow(Self.first(Self.sessionByRefreshSQL, refreshHash, className: "_Session", on: c))
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
        let deleted = try database.write { (tx) throws(ParseError) -> Bool in
            guard let s = try sessionRow(tokenHash: hash, on: tx.connection) else { return false }
            try tx.delete("_Session", objectId: s.row.objectId, identity: .master)
            return true
        }
        cache.remove(hash)
        guard deleted else { throw Self.invalidSession }
    }

    /// Deletes every session of `userId` except `sessionId` (a password change keeps the session
    /// that made it). Returns how many were deleted.
    @discardableResult
    public func revokeSessions(userId: String, except sessionId: String? = nil) throws(ParseError) -> Int {
        try database.write { (tx) throws(ParseError) in try revokeSessions(userId: userId, except: sessionId, in: tx) }
    }

    /// `revokeSessions` inside the caller's transaction.
    @discardableResult
    public func revokeSessions(userId: String, except sessionId: String?, in tx: WriteTransaction) throws(ParseError) -> Int {
        var filter = "\(Naming.fieldExpr("user", type: .pointer)) = ?"
        var binds: [SQLiteValue] = [.text(userId)]
        if let sessionId {
            filter += " AND objectId != ?"
            binds.append(.text(sessionId))
        }
        try tx.feedBeforeDelete("_Session", filter: filter, binds: binds)
        return try tx.connection.run("DELETE FROM \"_Session\" WHERE " + filter, binds)
    }

    /// Deletes all sessions of `userId` in `tx` (the user-deletion cascade, for the API layer's
    /// object service to call around its `beforeDelete` triggers).
    @discardableResult
    public func deleteUserSessions(_ userId: String, in tx: WriteTransaction) throws(ParseError) -> Int {
        try revokeSessions(userId: userId, except: nil, in: tx)
    }

    /// Deletes sessions whose token and refresh token have both expired (housekeeping, e.g. from
    /// a daily job). Returns how many were deleted.
    @discardableResult
    public func purgeExpiredSessions() throws(ParseError) -> Int {
        let nowISO = ISO8601.format(millis: clock.nowMillis())
        return try database.write { (tx) throws(ParseError) in
            let filter = """
                \(Naming.fieldExpr("expiresAt", type: .date)) <= ?
                AND coalesce(\(Naming.fieldExpr("refreshExpiresAt", type: .date)), '') <= ?
                """
            let binds: [SQLiteValue] = [.text(nowISO), .text(nowISO)]
            try tx.feedBeforeDelete("_Session", filter: filter, binds: binds)
            return try tx.connection.run("DELETE FROM \"_Session\" WHERE " + filter, binds)
        }
    }

    /// Empties the session cache (tests, operations). Correctness never depends on calling it.
    public func clearSessionCache() { cache.removeAll() }
}
