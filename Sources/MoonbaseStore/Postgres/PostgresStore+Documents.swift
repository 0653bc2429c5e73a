import MoonbaseCore
import MoonbaseCrypto
import MoonbaseJSON
import MoonbasePostgres

/// Transactions and single-object writes on PostgreSQL, with SQLite's Parse semantics: the
/// bodies are read by the same plans (`InsertPlan`, `UpdatePlan`), types follow the same
/// first-value rule, operators compute the same results (`FieldChange.apply`), ACL, CLP and
/// pointer permissions are the same checks.
///
/// An update reads its row `FOR UPDATE`, computes the new document in Swift and writes it back:
/// the row lock makes concurrent updates of one object queue instead of losing one another.
/// A write on its own runs READ COMMITTED (row locks make it correct, and concurrent writes to
/// one object wait rather than fail); `transaction` (`db.transaction`, a write with its
/// before-trigger, a `transaction: true` batch) runs SERIALIZABLE, retried on serialization
/// failure, then 141.
extension PostgresStore {
    // MARK: transactions

    /// Runs `body` as one SERIALIZABLE transaction; store calls on this thread inside it join it.
    public func transaction<T>(_ body: () throws(ParseError) -> T) throws(ParseError) -> T {
        try write(isolation: .serializable, exclusive: true) { (_) throws(ParseError) -> T in try body() }
    }

    /// The advisory lock key of multi-statement transactions (`transaction`): they run one at a
    /// time across every host, like SQLite's single writer (`BEGIN IMMEDIATE`). Without it, a
    /// burst of `db.transaction`s on one counter loses most SERIALIZABLE races, and a Lua body
    /// that keeps state outside the database would be re-run on every retry; with it, only a
    /// single-object write landing between them can still force the (rare) retry.
    static let transactionLockKey: Int64 = 0x4D6F_6F6E_5458

    /// Runs `action` after the outermost transaction on this thread commits, or now without one.
    public func afterCommit(_ action: @escaping () -> Void) {
        if let tx = pool.currentTransaction { tx.onCommit(action) } else { action() }
    }

    public var inTransaction: Bool { pool.currentTransaction != nil }

    /// THE way every store write reaches PostgreSQL (documents, query writes, accounts): joins
    /// the thread's transaction (a savepoint), or opens one at `isolation` and, as its last
    /// statements before COMMIT, numbers its change-feed rows (`recordChange`) in commit order.
    @discardableResult
    public func write<T>(isolation: PGIsolation = .readCommitted, exclusive: Bool = false,
                         _ body: (PGTransaction) throws(ParseError) -> T) throws(ParseError) -> T {
        if pool.currentTransaction != nil { return try pool.transaction(body) }
        var tickets: [UInt64] = []
        defer { for t in tickets { publishOrder.finish(t, nil) } }
        return try pool.transaction(isolation: isolation, exclusive: exclusive ? Self.transactionLockKey : nil) { (tx) throws(ParseError) -> T in
            let value = try body(tx)
            if let t = try flushChanges(tx) { tickets.append(t) }
            return value
        }
    }

    // MARK: objects

    public func insert(_ className: String, fields: JSONObject, acl: JSONValue? = nil, identity: Identity) throws(ParseError) -> StoredObject {
        try insert(className, fields: fields, acl: acl, identity: identity, allowInternalFields: false)
    }

    /// `insert` for trusted callers (the accounts side) that write `_`-prefixed fields such as
    /// `_hashed_password`; never for client input.
    /// - Throws: 103 bad class, 105 bad field name, 111 type mismatch, 119 CLP, 123 bad ACL,
    ///   137 unique index violation, 142 bad role.
    public func insert(_ className: String, fields: JSONObject, acl: JSONValue?, identity: Identity,
                       allowInternalFields: Bool) throws(ParseError) -> StoredObject {
        try SchemaCatalog.validateClassName(className)
        try checkCLP(.create, className, identity)
        return try write { (tx) throws(ParseError) -> StoredObject in
            if className == Roles.className { try checkRoleCreate(fields, acl: acl, in: tx) }
            var plan = try InsertPlan(className: className, fields: fields, acl: acl, allowInternalFields: allowInternalFields)
            let schema = try ensureFields(className, plan.types, identity: identity, in: tx)
            plan.addRelationMarkers(schema)
            let objectId = Random.alphanumeric(10)
            let aclObject = try plan.resolvedACL(className: className, objectId: objectId, identity: identity)
            let (rperm, wperm) = ACLs.permColumns(aclObject)
            let aclBytes = aclObject.map { JSONValue.object($0).jsonBytes }
            let dataBytes = try Self.storable(JSONValue.object(plan.data).jsonBytes)
            let now = clock.nowMillis()
            try tx.connection.execute("""
                INSERT INTO \(Naming.table(className))(objectId, createdAt, updatedAt, acl, rperm, wperm, data)
                VALUES($1, $2, $3, $4, \(Self.permArray(5)), \(Self.permArray(6)), $7)
                """, [.text(objectId), .integer(now), .integer(now), aclBytes.map { .json($0) } ?? .null,
                      Self.permParam(rperm), Self.permParam(wperm), .json(dataBytes)])
            let stored = StoredObject(className: className, rid: 0, objectId: objectId, createdAt: now, updatedAt: now,
                                      acl: aclBytes, rperm: rperm, wperm: wperm, data: dataBytes)
            try applyRelations(plan.relations, owner: objectId, className: className, in: tx)
            try recordChange(tx, className, objectId: objectId, op: .save, perm: nil, original: nil, current: stored)
            return stored
        }
    }

    public func update(_ className: String, objectId: String, changes: JSONObject, identity: Identity) throws(ParseError) -> StoredObject {
        try update(className, objectId: objectId, changes: changes, identity: identity, allowInternalFields: false)
    }

    /// `update` for trusted callers that write `_`-prefixed fields (see `insert`).
    /// - Throws: 101 when the object does not exist or `identity` may not write it, 105/111 bad
    ///   names, types or operators, 119 CLP, 123 bad ACL, 137 unique.
    @discardableResult
    public func update(_ className: String, objectId: String, changes: JSONObject, identity: Identity,
                       allowInternalFields: Bool) throws(ParseError) -> StoredObject {
        try SchemaCatalog.validateClassName(className)
        try checkCLP(.update, className, identity)
        guard schema(className) != nil else { throw ParseError(.objectNotFound, "Object not found.") }
        if className == Roles.className { try Roles.checkUpdate(changes) }
        return try write { (tx) throws(ParseError) -> StoredObject in
            let plan = try UpdatePlan(changes: changes, allowInternalFields: allowInternalFields)
            try ensureFields(className, plan.types, identity: identity, in: tx)
            guard let current = try fetchRow(className, objectId: objectId, forUpdate: true, on: tx.connection),
                  try mayWrite(current, .update, identity)
            else { throw ParseError(.objectNotFound, "Object not found.") }
            var data = try current.fields()
            try FieldChange.apply(plan.changes, to: &data)
            var acl = current.acl, rperm = current.rperm, wperm = current.wperm
            if let newACL = plan.acl {
                acl = newACL.map { JSONValue.object($0).jsonBytes }
                (rperm, wperm) = ACLs.permColumns(newACL)
            }
            let dataBytes = try Self.storable(JSONValue.object(data).jsonBytes)
            let now = clock.nowMillis()
            try tx.connection.execute("""
                UPDATE \(Naming.table(className)) SET updatedAt = $1, data = $2, acl = $3,
                  rperm = \(Self.permArray(4)), wperm = \(Self.permArray(5)) WHERE objectId = $6
                """, [.integer(now), .json(dataBytes), acl.map { .json($0) } ?? .null,
                      Self.permParam(rperm), Self.permParam(wperm), .text(objectId)])
            let stored = StoredObject(className: className, rid: 0, objectId: objectId, createdAt: current.createdAt,
                                      updatedAt: now, acl: acl, rperm: rperm, wperm: wperm, data: dataBytes)
            try applyRelations(plan.relations, owner: objectId, className: className, in: tx)
            try recordChange(tx, className, objectId: objectId, op: .save, perm: nil, original: current, current: stored)
            return stored
        }
    }

    /// Deletes one object; its Relation join rows go with it (triggers, same transaction).
    /// - Throws: 101 when it does not exist or `identity` may not write it; 119 CLP.
    public func delete(_ className: String, objectId: String, identity: Identity) throws(ParseError) {
        try SchemaCatalog.validateClassName(className)
        try checkCLP(.delete, className, identity)
        guard schema(className) != nil else { throw ParseError(.objectNotFound, "Object not found.") }
        try write { (tx) throws(ParseError) in
            guard let current = try fetchRow(className, objectId: objectId, forUpdate: true, on: tx.connection),
                  try mayWrite(current, .delete, identity)
            else { throw ParseError(.objectNotFound, "Object not found.") }
            try tx.connection.execute("DELETE FROM \(Naming.table(className)) WHERE objectId = $1", [.text(objectId)])
            try recordChange(tx, className, objectId: objectId, op: .delete, perm: current.rperm, original: current, current: nil)
        }
    }

    /// One object if `identity` may read it (CLP `get` and ACL), else nil.
    public func get(_ className: String, objectId: String, identity: Identity) throws(ParseError) -> StoredObject? {
        try SchemaCatalog.validateClassName(className)
        try checkCLP(.get, className, identity)
        guard schema(className) != nil else { return nil }
        let o = try pool.withConnection { (c) throws(ParseError) in try fetchRow(className, objectId: objectId, forUpdate: false, on: c) }
        guard let o, o.canRead(identity) else { return nil }
        return o
    }

    /// The stored object without any permission check; inside a transaction, as it sees it.
    public func fetchRaw(_ className: String, objectId: String) throws(ParseError) -> StoredObject? {
        guard schema(className) != nil else { return nil }
        try SchemaCatalog.validateClassName(className)
        return try pool.withConnection { (c) throws(ParseError) in try fetchRow(className, objectId: objectId, forUpdate: false, on: c) }
    }

    // MARK: rows

    /// The column list every reader of a class table selects, in the order
    /// `StoredObject(className:pgRow:)` expects: `rperm`/`wperm` come back in the stored
    /// object's `|a|b|` form (`|` for nobody, NULL for everyone).
    public static let objectColumns = objectColumns(alias: nil)

    /// `objectColumns` with every column qualified by `alias`.
    public static func objectColumns(alias: String?) -> String {
        let p = alias.map { "\($0)." } ?? ""
        func perm(_ c: String) -> String {
            "CASE WHEN \(p)\(c) IS NULL THEN NULL ELSE '|' || array_to_string(\(p)\(c), '|') "
                + "|| CASE WHEN cardinality(\(p)\(c)) > 0 THEN '|' ELSE '' END END"
        }
        return "\(p)objectId, \(p)createdAt, \(p)updatedAt, \(p)acl::text, \(perm("rperm")), \(perm("wperm")), \(p)data::text"
    }

    func fetchRow(_ className: String, objectId: String, forUpdate: Bool, on c: PGConnection) throws(ParseError) -> StoredObject? {
        let sql = "SELECT \(Self.objectColumns) FROM \(Naming.table(className)) WHERE objectId = $1" + (forUpdate ? " FOR UPDATE" : "")
        guard let row = try c.execute(sql, [.text(objectId)]).rows.first else { return nil }
        return StoredObject(className: className, pgRow: row)
    }

    /// What SQLite's write filter decides for one row: the ACL's write permission and, when class
    /// permissions limit `identity` to its own objects, one of the pointer fields naming it.
    func mayWrite(_ o: StoredObject, _ op: ClassOperation, _ identity: Identity) throws(ParseError) -> Bool {
        if identity.isMaster { return true }
        guard o.canWrite(identity) else { return false }
        if case .pointerFields(let fields) = ClassPermissions.access(op, o.className, identity, schema: schema(o.className)),
           let uid = identity.userId {
            return ClassPermissions.pointerConditionHolds(fields, object: try o.fields(), userId: uid)
        }
        return true
    }

    /// `$n` as a `text[]` from the `|a|b|` form (`|` → empty array, NULL → NULL).
    static func permArray(_ n: Int) -> String { "string_to_array($\(n)::text, '|')" }

    static func permParam(_ perm: String?) -> PGValue {
        guard let perm else { return .null }
        return .text(String(perm.dropFirst().dropLast()))
    }

    /// PostgreSQL's `jsonb` cannot hold U+0000: refused with 107 (as text parameters are)
    /// instead of failing inside the server. Checks the document's `\u0000` escapes.
    static func storable(_ json: [UInt8]) throws(ParseError) -> [UInt8] {
        var i = 0
        let n = json.count
        while i + 5 < n {
            if json[i] == UInt8(ascii: "\\") {
                if json[i + 1] == UInt8(ascii: "u"), json[i + 2] == 48, json[i + 3] == 48, json[i + 4] == 48, json[i + 5] == 48 {
                    throw ParseError(.invalidJSON, "strings may not contain the NUL character (U+0000)")
                }
                i += 2  // an escape: the next byte is not an escape's start
                continue
            }
            i += 1
        }
        return json
    }

    // MARK: relations

    /// Writes the relation members of `changes` for the owner `objectId`.
    func applyRelations(_ changes: [RelationChange], owner objectId: String, className: String, in tx: PGTransaction) throws(ParseError) {
        for c in changes {
            let j = Naming.joinTable(className, c.field)
            for id in c.adds {
                try tx.connection.execute("INSERT INTO \(j)(owningId, relatedId) VALUES($1, $2) ON CONFLICT DO NOTHING",
                                          [.text(objectId), .text(id)])
            }
            for id in c.removes {
                try tx.connection.execute("DELETE FROM \(j) WHERE owningId = $1 AND relatedId = $2", [.text(objectId), .text(id)])
            }
        }
    }

    // MARK: roles

    /// `_Role` create rules (`Roles.validateCreate`) and the unique name, looked up through a
    /// unique expression index that also makes two hosts' concurrent creates collide (137).
    func checkRoleCreate(_ fields: JSONObject, acl: JSONValue?, in tx: PGTransaction) throws(ParseError) {
        let name = try Roles.validateCreate(fields, acl: acl)
        try ensureClass(Roles.className, in: tx)
        let c = tx.connection
        if try c.execute("SELECT to_regclass('\"_Role__name\"') IS NULL").scalar == .bool(true) {
            try c.execute("SELECT pg_advisory_xact_lock($1::int, hashtext($2))",
                          [.integer(PostgresLayout.classLockSpace), .text(Roles.className)])
            try c.executeScript("CREATE UNIQUE INDEX IF NOT EXISTS \"_Role__name\" ON \"_Role\"((data ->> 'name'))")
        }
        if try c.execute("SELECT 1 FROM \"_Role\" WHERE data ->> 'name' = $1 LIMIT 1", [.text(name)]).rows.first != nil {
            throw ParseError(.duplicateValue, "A role with the name \(name) already exists.")
        }
    }

    /// The roles `userId` holds (names without `role:`), hierarchy expanded, sorted. Read from
    /// the database each time: another host may have changed them.
    public func roles(ofUser userId: String) throws(ParseError) -> [String] {
        guard let s = schema(Roles.className), s.fields["users"]?.type == .relation else { return [] }
        var sql = "WITH RECURSIVE held(id) AS (SELECT owningId FROM \(Naming.joinTable(Roles.className, "users")) WHERE relatedId = $1"
        if s.fields["roles"]?.type == .relation {
            sql += " UNION SELECT j.owningId FROM \(Naming.joinTable(Roles.className, "roles")) j JOIN held ON j.relatedId = held.id"
        }
        sql += ") SELECT DISTINCT r.data ->> 'name' FROM \"_Role\" r JOIN held ON r.objectId = held.id"
        let rows = try pool.withConnection { (c) throws(ParseError) in try c.execute(sql, [.text(userId)]).rows }
        return rows.compactMap { $0[0].string }.filter { Roles.isValidName($0) }.sorted()
    }

    /// The identity of a logged-in user, carrying its roles.
    public func identity(forUser userId: String) throws(ParseError) -> Identity {
        .user(userId, roles: try roles(ofUser: userId))
    }

    // MARK: lifecycle and idempotency

    /// Nothing to do: PostgreSQL made every commit durable when it returned.
    public func checkpoint() throws(ParseError) {}

    /// Closes the pool and stops listening to the other hosts; later calls fail with code 1.
    public func close() {
        fanout.stop()
        watch.stop()
        pool.close()
    }

    /// Records an `X-Parse-Request-Id`; false when already applied in the last 5 minutes (159).
    /// One statement: two hosts receiving the same id at once cannot both apply it.
    public func recordRequestId(_ id: String) throws(ParseError) -> Bool {
        let now = clock.nowMillis()
        let cutoff = now - RequestIdPruning.windowMillis
        return try pool.withConnection { (c) throws(ParseError) -> Bool in
            if RequestIdPruning.due(now: now) {
                try c.execute("DELETE FROM _mb_request_ids WHERE at < $1", [.integer(cutoff)])
            }
            return try c.execute("""
                INSERT INTO _mb_request_ids(id, at) VALUES($1, $2)
                ON CONFLICT (id) DO UPDATE SET at = excluded.at WHERE _mb_request_ids.at < $3
                """, [.text(id), .integer(now), .integer(cutoff)]).affectedRows > 0
        }
    }
}

extension StoredObject {
    /// Reads a row selected with `PostgresStore.objectColumns`, starting at column `offset`
    /// (`rid` is 0: PostgreSQL tables have no row id).
    public init(className: String, pgRow row: PGRow, offset: Int = 0) {
        func bytes(_ v: PGValue) -> [UInt8]? {
            switch v {
            case .text(let s): return Array(s.utf8)
            case .json(let b): return b
            default: return nil
            }
        }
        self.init(className: className, rid: 0, objectId: row[offset].string ?? "", createdAt: row[offset + 1].int64 ?? 0,
                  updatedAt: row[offset + 2].int64 ?? 0, acl: bytes(row[offset + 3]), rperm: row[offset + 4].string,
                  wperm: row[offset + 5].string, data: bytes(row[offset + 6]) ?? Array("{}".utf8))
    }
}
