import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// The SQLite `Store`: class tables in one database (layout in `Naming`), schemas in
/// `_mb_schema`, one serialised writer and per-thread readers (`Database`). The other protocols
/// are implemented in `SQLiteDocumentStore+<Protocol>.swift` beside this file.
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
    let schemaSource: CatalogSchemaSource
    let equalityFinds = EqualityFinds()
    var queries: QueryExecutor { QueryExecutor(schemas: schemaSource) }

    /// WAL frames written by this process's SQLite connections, the writes that carried them
    /// (a commit's frames are gathered into a few: `WALGather`), and the bytes of page copies
    /// kept in memory for savepoints and statements that may roll back alone.
    public static var walWrites: (frames: UInt64, writes: UInt64, subjournalBytes: UInt64) {
        let s = WALGather.stats
        return (s.frames, s.writes, s.subjournalBytes)
    }

    /// Attaches a store to `database`: registers the store's SQL functions (`mb_array_op`,
    /// `mb_polygon_contains`), creates or upgrades the internal tables (`Migrator`), loads the
    /// schema catalog. The functions come first: a connection gets the functions registered
    /// before it opens, and loading the catalog opens this thread's reader (a CLI verb's queries
    /// run on that thread, and `$polygon` failed there with "no such function").
    public init(database: Database, clock: any HostClock = SystemClock()) throws(ParseError) {
        try database.register(arrayOpFunction)
        try database.register(polygonContainsFunction)
        try Migrator.migrate(database)
        self.database = database
        self.context = StoreContext(catalog: try SchemaCatalog(database: database), clock: clock)
        self.schemaSource = CatalogSchemaSource(catalog: context.catalog)
        database.context = context
    }

    // MARK: transactions

    /// Runs `body` in one write transaction (`BEGIN IMMEDIATE`), joining an open one on this thread.
    public func transaction<T>(_ body: () throws(ParseError) -> T) throws(ParseError) -> T {
        try database.write { (_) throws(ParseError) -> T in try body() }
    }

    /// Group commit: runs `body(0)` … `body(count - 1)` in order in one write transaction, each
    /// in a savepoint of its own that is rolled back when it returns false (that part failed and
    /// must leave nothing), and commits once.
    /// - Throws: the commit's failure (then nothing of any part is kept).
    public func groupCommit(_ count: Int, _ body: (Int) -> Bool) throws(ParseError) {
        try database.write { (tx) throws(ParseError) in
            for i in 0..<count {
                try? tx.nested { (_) throws(ParseError) in
                    if !body(i) { throw SQLiteDocumentStore.undoPart }
                }
            }
        }
    }

    private static let undoPart = ParseError.internalError("part undone")

    public func afterCommit(_ action: @escaping () -> Void) {
        if let tx = database.currentTransaction { tx.onCommit(action) } else { action() }
    }

    public var inTransaction: Bool { database.currentTransaction != nil }

    /// Like `transaction`, with the SQLite transaction itself: for the store's own set-based SQL
    /// (internal tables), never for the layers above.
    func write<T>(_ body: (WriteTransaction) throws(ParseError) -> T) throws(ParseError) -> T {
        try database.write(body)
    }

    // MARK: objects

    // One object's write, no Lua: short (see `Database.write(short:)`).

    public func insert(_ className: String, fields: JSONObject, acl: JSONValue? = nil, identity: Identity) throws(ParseError) -> StoredObject {
        try database.write(short: true) { (tx) throws(ParseError) in try tx.insert(className, fields: fields, acl: acl, identity: identity) }
    }

    public func insert(prepared: PreparedInsert, identity: Identity) throws(ParseError) -> StoredObject {
        try database.write(short: true) { (tx) throws(ParseError) in try tx.insert(prepared: prepared, identity: identity) }
    }

    public func update(_ className: String, objectId: String, changes: JSONObject, identity: Identity) throws(ParseError) -> StoredObject {
        try database.write(short: true) { (tx) throws(ParseError) in
            try tx.update(className, objectId: objectId, changes: changes, identity: identity)
        }
    }

    public func delete(_ className: String, objectId: String, identity: Identity) throws(ParseError) {
        try database.write(short: true) { (tx) throws(ParseError) in try tx.delete(className, objectId: objectId, identity: identity) }
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

    // MARK: queries

    public func find(_ q: FindQuery, identity: Identity, afterFind: AfterFindHook? = nil,
                     afterFindApplies: ((String) -> Bool)? = nil) throws(ParseError) -> FindResult {
        let queries = self.queries
        return try database.read { (c) throws(ParseError) -> FindResult in
            try queries.find(q, identity: identity, on: c, afterFind: afterFind, afterFindApplies: afterFindApplies)
        }
    }

    public func findEqual(_ className: String, _ equal: JSONObject, limit: Int, identity: Identity) throws(ParseError) -> FindResult? {
        guard RowSerializer.canSplice(className), let schema = catalog.schema(className),
              ClassPermissions.access(.find, className, identity, schema: schema) == .allowed else { return nil }
        let plans = equalityFinds
        return try database.read { (c) throws(ParseError) -> FindResult? in
            try plans.find(schema, equal, limit: limit, identity: identity, on: c)
        }
    }

    public func holdReads() { database.holdReads() }
    public func releaseReads() { database.releaseReads() }

    public func count(_ className: String, where w: JSONValue?, identity: Identity) throws(ParseError) -> Int {
        let queries = self.queries
        return try database.read { (c) throws(ParseError) -> Int in
            try queries.count(className: className, where: w, identity: identity, on: c)
        }
    }

    public func distinct(_ className: String, field: String, where w: JSONValue?, identity: Identity) throws(ParseError) -> [JSONValue] {
        let queries = self.queries
        return try database.read { (c) throws(ParseError) -> [JSONValue] in
            try queries.distinct(className: className, field: field, where: w, identity: identity, on: c)
        }
    }

    // MARK: bulk writes

    public func deleteWhere(_ className: String, where w: JSONValue?, identity: Identity) throws(ParseError) -> Int {
        try database.write { (tx) throws(ParseError) -> Int in
            guard let compiled = try compile(className, w, identity: identity, in: tx) else { return 0 }
            return try tx.deleteWhere(className, where: compiled, identity: identity)
        }
    }

    public func updateWhere(_ className: String, where w: JSONValue?, changes: JSONObject, identity: Identity) throws(ParseError) -> Int {
        try database.write { (tx) throws(ParseError) -> Int in
            guard let compiled = try compile(className, w, identity: identity, in: tx) else { return 0 }
            return try tx.updateWhere(className, where: compiled, changes: changes, identity: identity)
        }
    }

    /// The `where` JSON compiled against the class's schema (nil: no such class).
    func compile(_ className: String, _ w: JSONValue?, identity: Identity, in tx: WriteTransaction) throws(ParseError) -> CompiledWhere? {
        guard let schema = try schemaSource.querySchema(className, on: tx.connection) else { return nil }
        return try QueryCompiler(schema: schema, subqueries: SubqueryContext(
            schemas: schemaSource, identity: identity, conn: tx.connection)).compile(w)
    }

    /// Set-based delete / update of the objects matching an already compiled `where` (tests).
    public func deleteWhere(_ className: String, where filter: CompiledWhere, identity: Identity) throws(ParseError) -> Int {
        try database.write { (tx) throws(ParseError) in try tx.deleteWhere(className, where: filter, identity: identity) }
    }

    public func updateWhere(_ className: String, where filter: CompiledWhere, changes: JSONObject, identity: Identity) throws(ParseError) -> Int {
        try database.write { (tx) throws(ParseError) in
            try tx.updateWhere(className, where: filter, changes: changes, identity: identity)
        }
    }

    public func beginBulkWork() { database.beginBulkWork() }
    public func endBulkWork() { database.endBulkWork() }

    // MARK: schema and permissions

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

    public var classNames: [String] { catalog.classNames }

    /// `PRAGMA wal_checkpoint(TRUNCATE)`: the WAL folded into the main file.
    public func checkpoint() throws(ParseError) { try database.checkpoint() }

    public func close() { database.close() }

    public func recordRequestId(_ id: String) throws(ParseError) -> Bool {
        try database.recordRequestId(id, now: clock.nowMillis())
    }
}

/// The composite: every protocol above is implemented in this folder.
extension SQLiteDocumentStore: Store {}
