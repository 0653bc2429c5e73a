import MoonbaseCore
import MoonbaseSQLite

extension SchemaCatalog {
    /// What class permissions let `identity` do for `op` on `className` (see `ClassAccess`).
    public func access(_ op: ClassOperation, _ className: String, _ identity: Identity) -> ClassAccess {
        if identity.isMaster { return .allowed }
        return ClassPermissions.access(op, className, identity, schema: schema(className))
    }

    /// The pointer-permission condition for `op` (over the unqualified `data` column), or nil
    /// when class permissions do not limit `identity` to its own objects.
    public func pointerRestriction(_ className: String, _ op: ClassOperation, _ identity: Identity) -> (sql: String, binds: [SQLiteValue])? {
        guard case .pointerFields(let fields) = access(op, className, identity), let uid = identity.userId else { return nil }
        return ClassPermissions.pointerCondition(fields, userId: uid)
    }

    /// The condition a row must meet for `identity` to update or delete it: the ACL's write
    /// permission (`wperm`, qualified by `alias` when given) and any pointer permission.
    public func writeFilter(_ className: String, _ op: ClassOperation, _ identity: Identity,
                            alias: String? = nil) -> (sql: String, binds: [SQLiteValue])? {
        var sql: [String] = []
        var binds: [SQLiteValue] = []
        if let w = ACLs.writeCondition(identity, column: alias.map { "\($0).wperm" } ?? "wperm") {
            sql.append(w.sql)
            binds += w.binds
        }
        if let p = pointerRestriction(className, op, identity) {
            sql.append(p.sql)
            binds += p.binds
        }
        return sql.isEmpty ? nil : (sql.joined(separator: " AND "), binds)
    }
}
