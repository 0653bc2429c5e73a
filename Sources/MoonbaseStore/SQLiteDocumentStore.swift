import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// The SQLite `DocumentStore`: class tables in one database (layout in `Naming`), schemas in
/// `_mb_schema`, one serialised writer and per-thread readers (`Database`).
///
/// Thread-safety: `Sendable`; every method may be called from any thread. Writes made inside
/// `transaction` (or inside another write on the same thread) join it.
///
/// ```swift
/// let store = try SQLiteDocumentStore(database: Database(path: "data/moonbase.sqlite"), clock: SystemClock())
/// let post = try store.insert("Post", fields: ["text": "hi"], acl: nil, identity: .user(uid))
/// try store.update("Post", objectId: post.objectId, changes: ["likes": ["__op": "Increment", "amount": 1]], identity: .master)
/// ```
public final class SQLiteDocumentStore: DocumentStore {
    public let database: Database
    public let context: StoreContext
    public var catalog: SchemaCatalog { context.catalog }
    public var clock: any HostClock { context.clock }

    /// Attaches a store to `database`: creates or upgrades the internal tables (`Migrator`),
    /// loads the schema catalog, registers `mb_array_op`.
    public init(database: Database, clock: any HostClock = SystemClock()) throws(ParseError) {
        try Migrator.migrate(database)
        self.database = database
        self.context = StoreContext(catalog: try SchemaCatalog(database: database), clock: clock)
        database.context = context
        try database.register(arrayOpFunction)
        try database.register(polygonContainsFunction)
    }

    /// Runs `body` in one write transaction (`BEGIN IMMEDIATE`), joining an open one on this thread.
    public func transaction<T>(_ body: () throws(ParseError) -> T) throws(ParseError) -> T {
        try database.write { (_) throws(ParseError) -> T in try body() }
    }

    /// Like `transaction`, with the SQLite transaction itself (for set-based SQL in bulk jobs).
    public func write<T>(_ body: (WriteTransaction) throws(ParseError) -> T) throws(ParseError) -> T {
        try database.write(body)
    }

    public func insert(_ className: String, fields: JSONObject, acl: JSONValue? = nil, identity: Identity) throws(ParseError) -> StoredObject {
        try database.write { (tx) throws(ParseError) in try tx.insert(className, fields: fields, acl: acl, identity: identity) }
    }

    public func update(_ className: String, objectId: String, changes: JSONObject, identity: Identity) throws(ParseError) -> StoredObject {
        try database.write { (tx) throws(ParseError) in
            try tx.update(className, objectId: objectId, changes: changes, identity: identity)
        }
    }

    public func delete(_ className: String, objectId: String, identity: Identity) throws(ParseError) {
        try database.write { (tx) throws(ParseError) in try tx.delete(className, objectId: objectId, identity: identity) }
    }

    public func get(_ className: String, objectId: String, identity: Identity) throws(ParseError) -> StoredObject? {
        try SchemaCatalog.validateClassName(className)
        try catalog.checkCLP(.get, className, identity)
        guard catalog.schema(className) != nil else { return nil }
        let o = try database.read { (c) throws(ParseError) in try c.fetchRaw(className, objectId: objectId) }
        guard let o, o.canRead(identity) else { return nil }
        return o
    }

    public func fetchRaw(_ className: String, objectId: String) throws(ParseError) -> StoredObject? {
        guard catalog.schema(className) != nil else { return nil }
        return try database.read { (c) throws(ParseError) in try c.fetchRaw(className, objectId: objectId) }
    }

    public func deleteWhere(_ className: String, where filter: CompiledWhere, identity: Identity) throws(ParseError) -> Int {
        try database.write { (tx) throws(ParseError) in try tx.deleteWhere(className, where: filter, identity: identity) }
    }

    public func updateWhere(_ className: String, where filter: CompiledWhere, changes: JSONObject, identity: Identity) throws(ParseError) -> Int {
        try database.write { (tx) throws(ParseError) in
            try tx.updateWhere(className, where: filter, changes: changes, identity: identity)
        }
    }

    public func setIndexes(_ className: String, _ specs: JSONObject) throws(ParseError) {
        try database.write { (tx) throws(ParseError) in try catalog.setIndexes(className, specs, in: tx) }
    }

    public func setClassPermissions(_ className: String, _ clp: JSONObject) throws(ParseError) {
        try database.write { (tx) throws(ParseError) in try catalog.setClassPermissions(className, clp, in: tx) }
    }

    public func checkCLP(_ op: ClassOperation, _ className: String, _ identity: Identity) throws(ParseError) {
        try catalog.checkCLP(op, className, identity)
    }

    public func getSchema(_ className: String) -> JSONValue? { catalog.schema(className)?.parseJSON }

    public func schema(_ className: String) -> ClassSchema? { catalog.schema(className) }

    public func recordRequestId(_ id: String) throws(ParseError) -> Bool {
        try database.recordRequestId(id, now: clock.nowMillis())
    }
}
