import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// The document store behind the REST API and Cloud Code: a protocol with the
/// SQLite implementation (`SQLiteDocumentStore`) as the default, so another backend can follow.
///
/// Contract for every implementation:
/// - each write is atomic; writes nested in `transaction` (or in another write on the same
///   thread, e.g. a trigger's `db.*` inside a `beforeSave`) join the outer transaction, and an
///   error that escapes the outermost one rolls everything back;
/// - ACL and class-level permission checks apply unless the identity is `.master`; a write the
///   caller may not make is 101 "Object not found.", a CLP denial 119;
/// - a field keeps the type of its first value (111 on mismatch).
public protocol DocumentStore: Sendable {
    /// Runs `body` as one atomic unit (`db.transaction`, a write and its `beforeSave`): the
    /// store calls it makes on this thread join the transaction; an error escaping `body`
    /// rolls all of them back. Reads inside see the transaction's own writes.
    func transaction<T>(_ body: () throws(ParseError) -> T) throws(ParseError) -> T
    /// Creates an object; see `WriteTransaction.insert`.
    func insert(_ className: String, fields: JSONObject, acl: JSONValue?, identity: Identity) throws(ParseError) -> StoredObject
    /// Updates one object atomically (ops included); see `WriteTransaction.update`.
    func update(_ className: String, objectId: String, changes: JSONObject, identity: Identity) throws(ParseError) -> StoredObject
    /// Deletes one object; see `WriteTransaction.delete`.
    func delete(_ className: String, objectId: String, identity: Identity) throws(ParseError)
    /// One object if `identity` may read it (CLP `get` and ACL), else nil.
    func get(_ className: String, objectId: String, identity: Identity) throws(ParseError) -> StoredObject?
    /// The stored object without any permission check (trigger `req.original`).
    func fetchRaw(_ className: String, objectId: String) throws(ParseError) -> StoredObject?
    /// Set-based delete / update of the objects matching a compiled `where` (bulk jobs).
    func deleteWhere(_ className: String, where filter: CompiledWhere, identity: Identity) throws(ParseError) -> Int
    func updateWhere(_ className: String, where filter: CompiledWhere, changes: JSONObject, identity: Identity) throws(ParseError) -> Int
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
    /// Records an `X-Parse-Request-Id`; false when already applied in the last 5 minutes (159).
    func recordRequestId(_ id: String) throws(ParseError) -> Bool
}
