import MoonbaseCore
import MoonbaseCrypto
import MoonbaseJSON
import MoonbaseStore

/// A profile change checked and prepared outside the write transaction (the password work is
/// done), to be applied by `AuthService.applyUserUpdate(_:)`.
public struct PreparedUserUpdate: Sendable {
    public var userId: String
    public var identity: Identity
    /// What the store will write (`password` replaced by `_hashed_password`).
    public var changes: JSONObject
    /// Whether the password changes (other sessions are then revoked).
    public var changesPassword: Bool
    /// The session that made the change (kept when the password changes).
    public var currentSessionId: String?
    var username: String?
    public internal(set) var email: String?
    /// The hash seen when `currentPassword` was verified: the update is refused if it changed since.
    var verifiedHash: String?
}

extension AuthService {
    /// `GET /parse/users/ID`: the user as `identity` sees it (email only for self or master).
    /// - Throws: 101 when there is no such user or `identity` may not read it; 119 (CLP `get`).
    public func getUser(_ id: String, identity: Identity) throws(ParseError) -> JSONObject {
        guard let user = try store.get("_User", objectId: id, identity: identity) else {
            throw ParseError(.objectNotFound, "Object not found.")
        }
        return try user.json(for: identity)
    }

    // MARK: Updating

    /// `PUT /parse/users/ID` and `PUT /parse/users/me`: returns `{"updatedAt": …}`.
    ///
    /// Only the user themself or the master key may write (101 otherwise). Changing `password`,
    /// or `email` to a different value, needs `currentPassword` in the same body (missing → 142,
    /// wrong → 101); the master key needs none. A taken username → 202, email → 203, a malformed
    /// email → 125, an empty username → 200, an empty password → 201. A password change revokes
    /// the user's other sessions (all of them when made with the master key).
    public func updateUser(_ id: String, changes: JSONObject, identity: Identity,
                           currentSessionId: String?) throws(ParseError) -> JSONObject {
        let prepared = try prepareUserUpdate(id, changes: changes, identity: identity, currentSessionId: currentSessionId)
        let row = try store.transaction { () throws(ParseError) in try applyUserUpdate(prepared) }
        return ["updatedAt": iso(row.updatedAt)]
    }

    /// First half of `updateUser`, outside any transaction: permission, validation, and the
    /// argon2id work (verifying `currentPassword`, hashing the new password). Call on a worker.
    public func prepareUserUpdate(_ id: String, changes: JSONObject, identity: Identity,
                                  currentSessionId: String?) throws(ParseError) -> PreparedUserUpdate {
        guard identity.isMaster || identity.userId == id else { throw ParseError(.objectNotFound, "Object not found.") }
        guard let user = try store.fetchRaw("_User", objectId: id) else { throw ParseError(.objectNotFound, "Object not found.") }
        let current = try user.fields()
        var out = try Self.clientFields(changes)

        var username: String?
        if let u = changes["username"] {
            guard let s = u.stringValue, !s.isEmpty, s.utf8.count <= 256 else { throw ParseError(.usernameMissing, "bad or missing username") }
            if s != current["username"]?.stringValue { username = s }
        }
        var email: String?
        var emailChanges = false
        if changes["email"] != nil {
            email = try Self.email(in: changes)
            emailChanges = changes["email"] != current["email"] && !(changes["email"]!.isNull && current["email"] == nil)
        }
        var newPassword: String?
        if let p = changes["password"] {
            guard let s = p.stringValue, !s.isEmpty else { throw ParseError(.passwordMissing, "password is required") }
            newPassword = s
        }
        var verifiedHash: String?
        if (newPassword != nil || emailChanges) && !identity.isMaster {
            guard let given = changes["currentPassword"]?.stringValue, !given.isEmpty else {
                throw ParseError(.validationError, "currentPassword is required to change the password or email.")
            }
            verifiedHash = try Self.passwordHash(of: user)
            guard let hash = verifiedHash, Password.verify(given, against: hash) else { throw Self.invalidCredentials }
        }
        try checkAvailable(username: username, email: emailChanges ? email : nil, except: id)
        if let newPassword { out["_hashed_password"] = .string(Password.hash(newPassword)) }
        return PreparedUserUpdate(userId: id, identity: identity, changes: out, changesPassword: newPassword != nil,
                                  currentSessionId: currentSessionId, username: username,
                                  email: emailChanges ? email : nil, verifiedHash: verifiedHash)
    }

    /// Second half of `updateUser`, in the caller's transaction (the API layer wraps it
    /// with `beforeSave`/`afterSave`): re-checks uniqueness on the writer, writes through the
    /// store (ACL and CLP apply to `identity`), revokes other sessions on a password change.
    /// - Returns: the stored user after the update.
    @discardableResult
    public func applyUserUpdate(_ p: PreparedUserUpdate) throws(ParseError) -> StoredObject {
        try store.transaction { () throws(ParseError) -> StoredObject in
            if let verified = p.verifiedHash {
                // The password changed between verification and now: the proof is stale.
                guard let row = try store.fetchRaw("_User", objectId: p.userId), try Self.passwordHash(of: row) == verified else {
                    throw Self.invalidCredentials
                }
            }
            try checkAvailable(username: p.username, email: p.email, except: p.userId)
            let row = try store.updateUser(p.userId, changes: p.changes, identity: p.identity)
            if p.changesPassword {
                try revokeSessions(userId: p.userId, except: p.identity.isMaster ? nil : p.currentSessionId)
            }
            return row
        }
    }

    // MARK: Deleting

    /// `DELETE /parse/users/ID`: deletes the user and all their sessions. Only the user themself
    /// or the master key (101 otherwise).
    /// Joins the caller's transaction if any (the API layer runs `beforeDelete` cascades in the
    /// same transaction first).
    public func deleteUser(_ id: String, identity: Identity) throws(ParseError) {
        guard identity.isMaster || identity.userId == id else { throw ParseError(.objectNotFound, "Object not found.") }
        try store.transaction { () throws(ParseError) in
            try deleteUserSessions(id)
            try store.delete("_User", objectId: id, identity: identity)
        }
    }
}
