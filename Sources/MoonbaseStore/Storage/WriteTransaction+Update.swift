import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

extension WriteTransaction {
    /// Applies `changes` to one object in a single `UPDATE … RETURNING` statement: plain sets
    /// and the operators `Increment`, `Delete`, `Add`, `AddUnique`, `Remove` are computed by
    /// SQLite from the row's current value, so concurrent updates never lose one another.
    /// `ACL` in `changes` replaces the ACL; `objectId`/`createdAt`/`updatedAt` are ignored.
    /// - Returns: the object as stored after the update.
    /// - Throws: 101 when the object does not exist or `identity` may not write it, 105/111
    ///   bad names or types (Increment of a non-number → 111), 119 CLP, 123 bad ACL, 137 unique.
    @discardableResult
    public func update(_ className: String, objectId: String, changes: JSONObject, identity: Identity,
                       allowInternalFields: Bool = false) throws(ParseError) -> StoredObject {
        let ctx = try storeContext()
        try SchemaCatalog.validateClassName(className)
        try ctx.catalog.checkCLP(.update, className, identity)
        guard ctx.catalog.schema(className) != nil else { throw ParseError(.objectNotFound, "Object not found.") }
        if className == Roles.className { try Roles.checkUpdate(changes); ctx.roles.invalidate(after: self) }
        let plan = try UpdatePlan(className: className, changes: changes, identity: identity,
                                  allowInternalFields: allowInternalFields, in: self)
        var binds: [SQLiteValue] = [.integer(ctx.clock.nowMillis())]
        var sql = "UPDATE \(Naming.table(className)) SET updatedAt = ?, data = \(FieldChange.dataExpression(plan.changes, binds: &binds))"
        plan.appendACL(to: &sql, binds: &binds)
        sql += " WHERE objectId = ?"
        binds.append(.text(objectId))
        if let w = ctx.catalog.writeFilter(className, .update, identity) {
            sql += " AND " + w.sql
            binds += w.binds
        }
        sql += " RETURNING \(StoredObject.columns)"
        var feedFilter = "t.objectId = ?"
        var feedBinds: [SQLiteValue] = [.text(objectId)]
        if let w = ctx.catalog.writeFilter(className, .update, identity, alias: "t") {
            feedFilter += " AND " + w.sql
            feedBinds += w.binds
        }
        let feed = try feedBeforeSave(className, filter: feedFilter, binds: feedBinds)
        let result = try connection.withStatement(sql) { (s) throws(ParseError) -> StoredObject? in
            try s.bind(binds)
            guard try s.step() else { return nil }
            let o = StoredObject(className: className, row: s)
            while try s.step() {}
            return o
        }
        guard let result else { throw ParseError(.objectNotFound, "Object not found.") }
        try applyRelations(plan.relations, owner: objectId, className: className)
        try feedAfterSave(feed)
        return result
    }

    /// Set-based update of every object matching `where` that `identity` may write (bulk jobs;
    /// no per-object triggers). `where.sql` may refer to the class table as `t`.
    /// - Returns: the number of objects changed.
    @discardableResult
    public func updateWhere(_ className: String, where filter: CompiledWhere, changes: JSONObject,
                            identity: Identity) throws(ParseError) -> Int {
        let ctx = try storeContext()
        try SchemaCatalog.validateClassName(className)
        try ctx.catalog.checkCLP(.update, className, identity)
        guard ctx.catalog.schema(className) != nil else { return 0 }
        if className == Roles.className { try Roles.checkUpdate(changes); ctx.roles.invalidate(after: self) }
        let plan = try UpdatePlan(className: className, changes: changes, identity: identity,
                                  allowInternalFields: false, in: self)
        guard plan.relations.isEmpty else {
            throw ParseError(.invalidQuery, "AddRelation and RemoveRelation apply to one object at a time, not to updateWhere")
        }
        var binds: [SQLiteValue] = [.integer(ctx.clock.nowMillis())]
        var sql = "UPDATE \(Naming.table(className)) AS t SET updatedAt = ?, data = \(FieldChange.dataExpression(plan.changes, binds: &binds))"
        plan.appendACL(to: &sql, binds: &binds)
        var feedFilter = "(\(filter.sql))"
        var feedBinds = filter.binds
        if let w = ctx.catalog.writeFilter(className, .update, identity, alias: "t") {
            feedFilter += " AND " + w.sql
            feedBinds += w.binds
        }
        sql += " WHERE " + feedFilter
        binds += feedBinds
        let feed = try feedBeforeSave(className, filter: feedFilter, binds: feedBinds)
        let n = try connection.run(sql, binds)
        try feedAfterSave(feed)
        return n
    }
}

extension UpdatePlan {
    /// The plan of `changes`, with its new fields recorded in the schema inside `tx`.
    init(className: String, changes body: JSONObject, identity: Identity, allowInternalFields: Bool,
         in tx: WriteTransaction) throws(ParseError) {
        self = try UpdatePlan(changes: body, allowInternalFields: allowInternalFields)
        try tx.storeContext().catalog.ensureFields(className, types, identity: identity, in: tx)
    }

    func appendACL(to sql: inout String, binds: inout [SQLiteValue]) {
        guard let acl else { return }
        let (r, w) = ACLs.permColumns(acl)
        sql += ", ACL = ?, rperm = ?, wperm = ?"
        binds.append(acl.map { .text(JSONValue.object($0).jsonString) } ?? .null)
        binds.append(r.map { .text($0) } ?? .null)
        binds.append(w.map { .text($0) } ?? .null)
    }
}
