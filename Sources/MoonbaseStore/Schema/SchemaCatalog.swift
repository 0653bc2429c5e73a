import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Synchronization

/// The class schemas of a database, cached in memory and persisted in `_mb_schema`.
///
/// Thread-safety: `Sendable`. Committed schemas sit behind a `Mutex`. A write transaction that
/// changes a schema (a class created on first write, a new field, an index, permissions) writes
/// its `_mb_schema` row in the transaction and stages the new value in the transaction's
/// `userInfo`; lookups on the writing thread see the staged value, other threads keep seeing the
/// committed one until the transaction commits (then it is published), and a rollback simply
/// drops it.
///
/// Lookups take no shared lock (`ThreadSnapshot`): every read of Cloud Code and REST asks for its
/// class's schema, from every worker and I/O thread.
public final class SchemaCatalog: Sendable {
    let database: Database
    private let committed = ThreadSnapshot<[String: ClassSchema]>([:])
    static let pendingKey = "moonbase.schema.pending"

    /// Loads every class schema from `_mb_schema`.
    public init(database: Database) throws(ParseError) {
        self.database = database
        try reload()
    }

    /// Re-reads `_mb_schema` (start-up, or after another process changed it).
    public func reload() throws(ParseError) {
        var all: [String: ClassSchema] = [:]
        try database.read { (c) throws(ParseError) in
            try c.query("SELECT className, fields, indexes, clp FROM _mb_schema") { (row) throws(ParseError) in
                let name = row.text(0) ?? ""
                let (fields, order) = ClassSchema.parseFields(try JSON.parse(row.bytes(1) ?? []))
                let indexes = try JSON.parse(row.bytes(2) ?? []).objectValue ?? [:]
                let clp = try JSON.parse(row.bytes(3) ?? []).objectValue ?? [:]
                all[name] = ClassSchema(className: name, fields: fields, fieldOrder: order, indexes: indexes, clp: clp)
            }
        }
        committed.update { $0 = all }
    }

    /// The schema of `className` as the calling thread sees it (staged changes of its own open
    /// write transaction included), or nil when the class does not exist yet.
    public func schema(_ className: String) -> ClassSchema? {
        if let tx = database.currentTransaction, let pending = tx.userInfo[Self.pendingKey] as? [String: ClassSchema],
           let s = pending[className] {
            return s
        }
        return committed.read { $0[className] }
    }

    /// Names of the existing classes (committed).
    public var classNames: [String] { Array(committed.current.keys).sorted() }

    /// Writes `schema` to `_mb_schema` in `tx` and stages it until commit.
    func stage(_ schema: ClassSchema, in tx: WriteTransaction) throws(ParseError) {
        try tx.connection.run("""
            INSERT INTO _mb_schema(className, fields, indexes, clp) VALUES(?1, ?2, ?3, ?4)
            ON CONFLICT(className) DO UPDATE SET fields = ?2, indexes = ?3, clp = ?4
            """, [.text(schema.className), .text(JSONValue.object(schema.fieldsJSON).jsonString),
                  .text(JSONValue.object(schema.indexes).jsonString), .text(JSONValue.object(schema.clp).jsonString)])
        var pending = tx.userInfo[Self.pendingKey] as? [String: ClassSchema]
        if pending == nil {
            pending = [:]
            tx.onCommit { [weak tx] in
                guard let staged = tx?.userInfo[Self.pendingKey] as? [String: ClassSchema] else { return }
                self.committed.update { all in for (k, v) in staged { all[k] = v } }
            }
        }
        pending![schema.className] = schema
        tx.userInfo[Self.pendingKey] = pending
    }

    /// The class's schema, creating its table (and `_mb_schema` row) on first use.
    /// - Throws: 103 for an invalid class name.
    @discardableResult
    public func ensureClass(_ className: String, in tx: WriteTransaction) throws(ParseError) -> ClassSchema {
        if let s = schema(className) { return s }
        try Self.validateClassName(className)
        try tx.connection.execute(Naming.classTableDDL(className))
        let s = ClassSchema(className: className)
        try stage(s, in: tx)
        return s
    }

    public static func validateClassName(_ className: String) throws(ParseError) {
        guard Naming.isValidClassName(className), !className.hasPrefix(Naming.internalPrefix) else {
            throw ParseError(.invalidClassName, "invalid class name: \(className)")
        }
    }

    /// Checks `incoming` field types against the schema and records the new ones: a field keeps
    /// its first type (111 on mismatch); a new GeoPoint field gets its R*Tree; declared indexes
    /// over fields whose type is now known are rebuilt with the type-aware expression.
    /// - Throws: 111 on a type mismatch, 119 when CLP `addField` forbids a new field.
    @discardableResult
    func ensureFields(_ className: String, _ incoming: [(String, FieldInfo)], identity: Identity,
                      in tx: WriteTransaction) throws(ParseError) -> ClassSchema {
        if InlineAttempt.active {
            // A new class or field may build tables and indexes over every row: not on an I/O thread.
            guard let known = schema(className), incoming.allSatisfy({ known.fields[$0.0] != nil }) else {
                throw InlineAttempt.continuesOnWorker
            }
        }
        var s = try ensureClass(className, in: tx)
        let added = try s.addFields(incoming, identity: identity)
        guard !added.isEmpty else { return s }
        for (name, info) in added {
            if info.type == .geoPoint { try tx.connection.execute(Naming.geoDDL(className, name)) }
            if info.type == .relation, let target = info.targetClass {
                if target != className { try ensureClass(target, in: tx) }
                try tx.connection.execute(Naming.relationDDL(owner: className, field: name, target: target))
            }
        }
        for spec in s.indexesToRebuild(after: added) {
            try tx.connection.execute("DROP INDEX IF EXISTS \(Naming.indexName(className, spec.name))")
            try tx.connection.execute(Naming.indexDDL(className, spec, fields: s.fields))
        }
        try stage(s, in: tx)
        return s
    }

    // MARK: Permissions

    /// Throws 119 unless `identity` may perform `op` on `className`.
    public func checkCLP(_ op: ClassOperation, _ className: String, _ identity: Identity) throws(ParseError) {
        if identity.isMaster { return }
        try ClassPermissions.check(op, className, identity, schema: schema(className))
    }

    /// Replaces the class-level permissions of `className` (creating the class if needed).
    public func setClassPermissions(_ className: String, _ clp: JSONObject, in tx: WriteTransaction) throws(ParseError) {
        var s = try ensureClass(className, in: tx)
        let valid = try ClassPermissions.validate(clp)
        guard valid != s.clp else { return }
        s.clp = valid
        try stage(s, in: tx)
    }
}
