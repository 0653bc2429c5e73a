import MoonbaseAuth
import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore

/// `_User` writes, whatever path they come by (`/parse/users`, `/parse/classes/_User`, Lua
/// `db.*`): sign-up hashes the password, updates follow the `currentPassword` rules and revoke
/// sessions on a password change (MoonbaseAuth), and the `_User` triggers run around them like
/// for any class — `beforeSave` inside the write transaction.
extension Services {
    /// Deletes a user with its sessions, running `_User` triggers (the Lua cascade) in the
    /// same transaction.
    func deleteUser(_ id: String, caller: CallerContext) throws(ParseError) {
        guard caller.identity.isMaster || caller.identity.userId == id else {
            throw ParseError(.objectNotFound, "Object not found.")
        }
        try store.transaction { () throws(ParseError) in
            _ = try auth.revokeSessions(userId: id)
            try objects.delete("_User", id, caller: caller)
        }
        auth.clearSessionCache()
    }

    func signUp(_ body: JSONObject, caller: CallerContext) throws(ParseError) -> AuthResult {
        var input = body
        try Services.checkEmailVerifiedWrite(body, caller)
        // A new address is unverified until its owner opens the verification link.
        if let e = body["email"], !e.isNull, body["emailVerified"] == nil { input["emailVerified"] = .bool(false) }
        if let t = objects.triggers, t.hasTrigger(.beforeSave, "_User") {
            let password = input.removeValue(forKey: "password")
            var visible = input
            for k in visible.keys where k.hasPrefix("_") { visible.removeValue(forKey: k) }
            input = try t.runSave(.beforeSave, className: "_User", object: visible, original: nil, caller: caller)
            if let password { input["password"] = password }
        }
        let r = try auth.signUp(body: input, ip: caller.ip, identity: caller.identity)
        if input["emailVerified"]?.boolValue == false { sendVerificationIfConfigured(email: input["email"]?.stringValue) }
        return r
    }

    /// `emailVerified` is the host's to set (after a verification link) or the master key's.
    static func checkEmailVerifiedWrite(_ changes: JSONObject, _ caller: CallerContext) throws(ParseError) {
        if changes["emailVerified"] != nil && !caller.identity.isMaster {
            throw ParseError(.operationForbidden, "Clients aren't allowed to manually update email verification.")
        }
    }

    func updateUser(_ id: String, _ changes: JSONObject, caller: CallerContext, sessionId: String?) throws(ParseError) -> JSONObject {
        try Services.checkEmailVerifiedWrite(changes, caller)
        var prepared = try auth.prepareUserUpdate(id, changes: changes, identity: caller.identity, currentSessionId: sessionId)
        if prepared.email != nil && changes["emailVerified"] == nil { prepared.changes["emailVerified"] = .bool(false) }
        let triggers = objects.triggers
        let store = objects.store
        let row = try store.transaction { () throws(ParseError) -> StoredObject in
            if let t = triggers, t.hasTrigger(.beforeSave, "_User") {
                guard let current = try store.fetchRaw("_User", objectId: id) else {
                    throw ParseError(.objectNotFound, "Object not found.")
                }
                let original = try current.json(for: .master)
                var visible = JSONObject()
                var internalFields = JSONObject()
                for e in prepared.changes {
                    if e.key.hasPrefix("_") { internalFields[e.key] = e.value } else { visible[e.key] = e.value }
                }
                let merged = UpdateView.apply(visible, to: original)
                let result = try t.runSave(.beforeSave, className: "_User", object: merged, original: original, caller: caller)
                var final = UpdateView.diff(changes: visible, merged: merged, result: result, original: original)
                for e in internalFields { final[e.key] = e.value }
                prepared.changes = final
            }
            return try auth.applyUserUpdate(prepared)
        }
        caller.meter?.dbWrites += 1
        if prepared.email != nil && changes["emailVerified"] == nil { sendVerificationIfConfigured(email: prepared.email) }
        return ["updatedAt": .string(ISO8601.format(millis: row.updatedAt))]
    }
}
