import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres

/// `deleteWhere` / `updateWhere` on PostgreSQL: the matching objects the caller may write are
/// found and locked in one statement (`PostgresQuery.writableIds`), then each is written through
/// the one-object path, so the change feed, relation clean-up and the first-value type rule are
/// exactly the single-object ones. Set-based SQL as on SQLite would be faster for large cleanups;
/// correctness came first here (the bulk benchmark runs on SQLite).
extension PostgresStore {
    public func deleteWhere(_ className: String, where w: JSONValue?, identity: Identity) throws(ParseError) -> Int {
        try SchemaCatalog.validateClassName(className)
        try checkCLP(.delete, className, identity)
        guard schema(className) != nil else { return 0 }
        return try write { (tx) throws(ParseError) -> Int in
            let ids = try PostgresQuery.writableIds(className, where: w, op: .delete, identity: identity, store: self, on: tx.connection)
            // The rows were permission-checked and locked above: delete them as master.
            for id in ids { try delete(className, objectId: id, identity: .master) }
            return ids.count
        }
    }

    public func updateWhere(_ className: String, where w: JSONValue?, changes: JSONObject, identity: Identity) throws(ParseError) -> Int {
        try SchemaCatalog.validateClassName(className)
        try checkCLP(.update, className, identity)
        guard schema(className) != nil else { return 0 }
        if className == Roles.className { try Roles.checkUpdate(changes) }
        // Relation ops name one owner; a bulk update refuses them as on SQLite.
        for e in changes {
            if let op = e.value.objectValue?["__op"]?.stringValue, op == "AddRelation" || op == "RemoveRelation" {
                throw ParseError(.invalidQuery, "AddRelation and RemoveRelation apply to one object at a time, not to updateWhere")
            }
        }
        return try write { (tx) throws(ParseError) -> Int in
            let ids = try PostgresQuery.writableIds(className, where: w, op: .update, identity: identity, store: self, on: tx.connection)
            for id in ids { try update(className, objectId: id, changes: changes, identity: .master) }
            return ids.count
        }
    }

    /// SQLite grows its writer cache while a job runs; PostgreSQL's memory is the server's.
    public func beginBulkWork() {}
    public func endBulkWork() {}
}

extension PostgresStore: DocumentStore, AccountStore, JobHistoryStore, Store {}
