import MoonbaseCore
import MoonbaseSQLite

extension WriteTransaction {
    /// Deletes one object; its R*Tree and FTS rows go with it (SQL triggers, same transaction).
    /// - Throws: 101 when it does not exist or `identity` may not write it; 119 CLP.
    public func delete(_ className: String, objectId: String, identity: Identity) throws(ParseError) {
        let ctx = try storeContext()
        try SchemaCatalog.validateClassName(className)
        try ctx.catalog.checkCLP(.delete, className, identity)
        guard ctx.catalog.schema(className) != nil else { throw ParseError(.objectNotFound, "Object not found.") }
        if className == Roles.className { ctx.roles.invalidate(after: self) }
        var filter = "t.objectId = ?"
        var binds: [SQLiteValue] = [.text(objectId)]
        if let w = ctx.catalog.writeFilter(className, .delete, identity, alias: "t") {
            filter += " AND " + w.sql
            binds += w.binds
        }
        try feedBeforeDelete(className, filter: filter, binds: binds)
        guard try connection.run("DELETE FROM \(Naming.table(className)) AS t WHERE \(filter)", binds) == 1 else { throw ParseError(.objectNotFound, "Object not found.") }
    }

    /// Set-based delete of every object matching `where` that `identity` may write (bulk jobs
    /// and cascades; no per-object Cloud Code triggers). `where.sql` may refer to the table as `t`.
    /// - Returns: the number of objects deleted.
    @discardableResult
    public func deleteWhere(_ className: String, where filter: CompiledWhere, identity: Identity) throws(ParseError) -> Int {
        let ctx = try storeContext()
        try SchemaCatalog.validateClassName(className)
        try ctx.catalog.checkCLP(.delete, className, identity)
        guard ctx.catalog.schema(className) != nil else { return 0 }
        if className == Roles.className { ctx.roles.invalidate(after: self) }
        var sql = "DELETE FROM \(Naming.table(className)) AS t WHERE (\(filter.sql))"
        var feedFilter = "(\(filter.sql))"
        var binds = filter.binds
        if let w = ctx.catalog.writeFilter(className, .delete, identity, alias: "t") {
            sql += " AND " + w.sql
            feedFilter += " AND " + w.sql
            binds += w.binds
        }
        try feedBeforeDelete(className, filter: feedFilter, binds: binds)
        return try connection.run(sql, binds)
    }

    /// The stored object with no ACL or CLP check (for triggers' `req.original`), or nil.
    public func fetchRaw(_ className: String, objectId: String) throws(ParseError) -> StoredObject? {
        let ctx = try storeContext()
        guard ctx.catalog.schema(className) != nil else { return nil }
        return try connection.fetchRaw(className, objectId: objectId)
    }
}

extension Connection {
    /// The stored object with no ACL check, or nil (the class table must exist).
    public func fetchRaw(_ className: String, objectId: String) throws(ParseError) -> StoredObject? {
        try SchemaCatalog.validateClassName(className)
        return try withStatement("SELECT \(StoredObject.columns) FROM \(Naming.table(className)) WHERE objectId = ?") {
            (s) throws(ParseError) -> StoredObject? in
            try s.bind(.text(objectId), at: 1)
            return try s.step() ? StoredObject(className: className, row: s) : nil
        }
    }
}
