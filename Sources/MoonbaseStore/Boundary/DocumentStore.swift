import MoonbaseCore
import MoonbaseJSON

/// The document store behind the REST API and Cloud Code: objects, queries, bulk writes,
/// schema and transactions. `SQLiteDocumentStore` implements it; another backend implements the
/// same protocol, so no method exposes a connection, a statement or SQL text.
///
/// Contract for every implementation:
/// - each write is atomic; writes nested in `transaction` (or in another write on the same
///   thread, e.g. a trigger's `db.*` inside a `beforeSave`) join the outer transaction, and an
///   error that escapes the outermost one rolls everything back;
/// - ACL and class-level permission checks apply unless the identity is `.master`; a write the
///   caller may not make is 101 "Object not found.", a CLP denial 119;
/// - a field keeps the type of its first value (111 on mismatch).
public protocol DocumentStore: Sendable {
    // MARK: transactions

    /// Runs `body` as one atomic unit (`db.transaction`, a write and its `beforeSave`): the
    /// store calls it makes on this thread join the transaction; an error escaping `body`
    /// rolls all of them back. Reads inside see the transaction's own writes.
    func transaction<T>(_ body: () throws(ParseError) -> T) throws(ParseError) -> T
    /// Runs `action` after the outermost transaction open on this thread commits (dropped if it
    /// rolls back), or at once when none is open (after-triggers, cache publication).
    func afterCommit(_ action: @escaping () -> Void)
    /// Whether this thread is inside a transaction (it holds the writer).
    var inTransaction: Bool { get }

    // MARK: objects

    /// Creates an object (CLP `create`, new fields added to the schema, the default ACL when
    /// `acl` is nil).
    func insert(_ className: String, fields: JSONObject, acl: JSONValue?, identity: Identity) throws(ParseError) -> StoredObject
    /// The same create of a body validated beforehand (`PreparedInsert`).
    func insert(prepared: PreparedInsert, identity: Identity) throws(ParseError) -> StoredObject
    /// Updates one object atomically (ops included); 101 when it is missing or not writable.
    func update(_ className: String, objectId: String, changes: JSONObject, identity: Identity) throws(ParseError) -> StoredObject
    /// Deletes one object; 101 when it is missing or not writable.
    func delete(_ className: String, objectId: String, identity: Identity) throws(ParseError)
    /// One object if `identity` may read it (CLP `get` and ACL), else nil.
    func get(_ className: String, objectId: String, identity: Identity) throws(ParseError) -> StoredObject?
    /// The stored object without any permission check (trigger `req.original`). Inside a
    /// transaction it sees the transaction's own writes.
    func fetchRaw(_ className: String, objectId: String) throws(ParseError) -> StoredObject?

    // MARK: queries

    /// Runs a find (or count, `q.operation`) as `identity`: ACLs and pointer permissions apply;
    /// the class-level permission is the caller's to check (`checkCLP`). `afterFind` (nil for
    /// master reads) edits the objects of the classes `afterFindApplies` names, included ones too.
    /// - Throws: 102/105/111 for bad queries, 1 for storage failures.
    func find(_ q: FindQuery, identity: Identity, afterFind: AfterFindHook?,
              afterFindApplies: ((String) -> Bool)?) throws(ParseError) -> FindResult
    /// The answer `find` gives for `where = equal` (only `field = scalar` equalities), `limit` and
    /// no other option, from a statement cached by the query's shape; nil when the store has no
    /// such path for this query (the caller then runs `find`). The caller has checked `afterFind`
    /// (none applies) and the class permission is checked here: a caller not allowed every
    /// object gets nil.
    func findEqual(_ className: String, _ equal: JSONObject, limit: Int, identity: Identity) throws(ParseError) -> FindResult?
    /// From now until `releaseReads`, the calling thread's reads may share one read transaction
    /// (a run of reads by one Cloud Code call); a write on the thread ends it first, so later
    /// reads see the write. Stores without such a cost ignore it.
    func holdReads()
    /// Ends `holdReads` on the calling thread.
    func releaseReads()
    /// How many objects of `className` match `where` that `identity` may read.
    func count(_ className: String, where w: JSONValue?, identity: Identity) throws(ParseError) -> Int
    /// The distinct values of `field` among the matching objects `identity` may read.
    func distinct(_ className: String, field: String, where w: JSONValue?, identity: Identity) throws(ParseError) -> [JSONValue]

    // MARK: bulk writes

    /// Deletes every object matching the `where` JSON that `identity` may delete, set-based
    /// (no triggers); the query is compiled inside the store. - Returns: how many.
    func deleteWhere(_ className: String, where w: JSONValue?, identity: Identity) throws(ParseError) -> Int
    /// Applies `changes` (ops included) to every matching object `identity` may update.
    func updateWhere(_ className: String, where w: JSONValue?, changes: JSONObject, identity: Identity) throws(ParseError) -> Int
    /// Raises the store's write caches while bulk work (a job) runs; `endBulkWork` lowers them
    /// when the last one ends. Best effort.
    func beginBulkWork()
    func endBulkWork()

    // MARK: schema and permissions

    /// Declares indexes (Parse's `indexes` format; `IndexSpec`). Master / Cloud Code only.
    func setIndexes(_ className: String, _ specs: JSONObject) throws(ParseError)
    /// Replaces class-level permissions. Master / Cloud Code only.
    func setClassPermissions(_ className: String, _ clp: JSONObject) throws(ParseError)
    /// Throws 119 unless `identity` may perform `op` on `className`.
    func checkCLP(_ op: ClassOperation, _ className: String, _ identity: Identity) throws(ParseError)
    /// `GET /parse/schemas/CLASS` JSON, or nil when the class does not exist.
    func getSchema(_ className: String) -> JSONValue?
    /// The class schema (fields, indexes, CLP), or nil.
    func schema(_ className: String) -> ClassSchema?
    /// The names of every class, sorted.
    var classNames: [String] { get }

    // MARK: users and roles

    /// The roles `userId` holds (names without `role:`), hierarchy expanded.
    func roles(ofUser userId: String) throws(ParseError) -> [String]
    /// The identity of a logged-in user, carrying its roles.
    func identity(forUser userId: String) throws(ParseError) -> Identity

    // MARK: lifecycle

    /// Makes everything committed durable in the main database file (at shutdown).
    func checkpoint() throws(ParseError)
    /// Closes the store; later calls fail with 1 "database is closed".
    func close()

    // MARK: idempotency

    /// Records an `X-Parse-Request-Id`; false when already applied in the last 5 minutes (159).
    func recordRequestId(_ id: String) throws(ParseError) -> Bool
}

extension DocumentStore {
    /// Stores that do no work ahead of the transaction create from the body.
    public func insert(prepared: PreparedInsert, identity: Identity) throws(ParseError) -> StoredObject {
        try insert(prepared.className, fields: prepared.fields, acl: nil, identity: identity)
    }

    /// No cached path: `find` answers.
    public func findEqual(_ className: String, _ equal: JSONObject, limit: Int, identity: Identity) throws(ParseError) -> FindResult? {
        nil
    }
    public func holdReads() {}
    public func releaseReads() {}
}
