import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// Object ACLs: validation, defaults and the `rperm`/`wperm` columns that let SQL check them.
///
/// `rperm`/`wperm` are NULL when everyone may read/write (no ACL, or `"*"` granted), else
/// `|id1|id2|` (just `|` when nobody but the master key). A reader or writer `uid` matches with
/// `instr(rperm, '|uid|') > 0`; a role entry `role:Name` is stored the same way and matches a
/// user whose identity carries that role (`Identity.roles`), one bound `instr` test per role.
public enum ACLs {
    /// Validates an ACL (`{"*":{"read":true},"uid":{"read":true,"write":true}}`).
    /// - Throws: 123 "invalid ACL" for anything else.
    public static func validate(_ v: JSONValue) throws(ParseError) -> JSONObject {
        guard let o = v.objectValue else { throw ParseError(.invalidACL, "invalid ACL: must be an object") }
        for e in o {
            let key = e.key
            let okKey = key == "*" || (key.hasPrefix("role:") && Roles.isValidName(String(key.dropFirst(5))))
                || (!key.isEmpty && key.utf8.count <= 64 && key.utf8.allSatisfy { ClassPermissions.isIdChar($0) })
            guard okKey, let perms = e.value.objectValue else { throw ParseError(.invalidACL, "invalid ACL entry: \(key)") }
            for p in perms {
                guard p.key == "read" || p.key == "write", p.value.boolValue != nil else {
                    throw ParseError(.invalidACL, "invalid ACL permission for \(key): \(p.key)")
                }
            }
        }
        return o
    }

    /// Moonbase's default: public read, owner read/write for a user session; none
    /// (public) for anonymous or master. A `_User` row is public read, self write.
    public static func defaultACL(className: String, objectId: String, identity: Identity) -> JSONObject? {
        if className == "_User" { return ["*": ["read": true], objectId: ["read": true, "write": true]] }
        guard let uid = identity.userId else { return nil }
        return ["*": ["read": true], uid: ["read": true, "write": true]]
    }

    /// `rperm`, `wperm` for an ACL (nil = public).
    public static func permColumns(_ acl: JSONObject?) -> (rperm: String?, wperm: String?) {
        guard let acl else { return (nil, nil) }
        func list(_ perm: String) -> String? {
            if acl["*"]?[perm]?.boolValue == true { return nil }
            let ids = acl.entries.filter { $0.value[perm]?.boolValue == true }.map(\.key)
            return "|" + ids.map { $0 + "|" }.joined()
        }
        return (list("read"), list("write"))
    }

    /// SQL condition restricting rows to those `identity` may write, or nil for the master key.
    public static func writeCondition(_ identity: Identity, column: String = "wperm") -> (sql: String, binds: [SQLiteValue])? {
        condition(identity, column: column)
    }

    static func condition(_ identity: Identity, column: String) -> (sql: String, binds: [SQLiteValue])? {
        switch identity {
        case .master: return nil
        case .anonymous: return ("\(column) IS NULL", [])
        case .user: return principalCondition(identity, column: column, orPublic: "\(column) IS NULL")
        }
    }

    /// `(public OR instr(column,'|uid|')>0 OR instr(column,'|role:A|')>0 …)`: one bound test per
    /// principal of a user identity (the user id, then each role). Nothing from the identity is
    /// spliced into the text.
    static func principalCondition(_ identity: Identity, column: String, orPublic: String) -> (sql: String, binds: [SQLiteValue]) {
        var sql = "(" + orPublic
        var binds: [SQLiteValue] = []
        for p in principals(identity) {
            sql += " OR instr(\(column), ?) > 0"
            binds.append(.text("|\(p)|"))
        }
        return (sql + ")", binds)
    }

    /// The ACL keys that grant `identity` access: its user id and `role:NAME` for each role.
    public static func principals(_ identity: Identity) -> [String] {
        guard let uid = identity.userId else { return [] }
        return [uid] + identity.roles.map { "role:" + $0 }
    }

    /// Whether a permission column value admits `identity`.
    public static func admits(_ perm: String?, _ identity: Identity) -> Bool {
        guard let perm else { return true }
        switch identity {
        case .master: return true
        case .anonymous: return false
        case .user: return principals(identity).contains { perm.contains("|\($0)|") }
        }
    }
}
