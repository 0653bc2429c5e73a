import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import Synchronization

/// The schema catalog on PostgreSQL: one `_mb_schema` row per class (`fields`, `indexes`, `clp`
/// as JSON text, in declaration order), the same `ClassSchema` values and rules as on SQLite
/// (`ClassSchema.addFields`, `planIndexes`, `ClassPermissions.check`).
///
/// Several hosts share the database, so this host's copy is a cache: a class it does not know
/// is looked up in `_mb_schema`; a write that adds fields or changes indexes or permissions
/// locks the class's row (`FOR UPDATE`) and applies its change to the row as committed, never
/// to this host's possibly older copy (two hosts adding different fields both keep theirs).
/// Changes are staged in the transaction (`PGTransaction.userInfo`) and seen by it alone until
/// it commits. The commit notifies every host (`NOTIFY mb_schema`, the class name as payload),
/// and each drops its copy of that class; a host only caches while it listens, and drops every
/// copy when its listening connection comes back after a loss (notifications were missed).
extension PostgresStore {
    static let pendingSchemaKey = "moonbase.pg.schema.pending"

    /// The schema of `className` as the calling thread sees it (its open transaction's staged
    /// changes included), or nil when the class does not exist.
    public func schema(_ className: String) -> ClassSchema? { try? lookupSchema(className) }

    /// `schema`, with storage errors thrown rather than read as "no such class" (queries need
    /// the difference). `conn`: a connection the caller already holds (a query in progress),
    /// so a cache miss reads through it instead of taking a second one from the pool.
    func lookupSchema(_ className: String, on conn: PGConnection? = nil) throws(ParseError) -> ClassSchema? {
        if let tx = pool.currentTransaction, let s = pendingSchemas(tx)[className] { return s }
        watch.ensureStarted(url: url)
        if let s = schemaCache.get(className) { return s }
        guard Naming.isValidClassName(className) else { return nil }
        return try loadSchema(className, lock: false, on: conn)
    }

    /// `GET /parse/schemas/CLASS` JSON, or nil when the class does not exist.
    public func getSchema(_ className: String) -> JSONValue? { schema(className)?.parseJSON }

    /// Every class in the database (all hosts' classes), sorted by byte order.
    public var classNames: [String] {
        let names = try? pool.withConnection { (c) throws(ParseError) -> [String] in
            try c.execute("SELECT className FROM _mb_schema").rows.compactMap { $0[0].string }
        }
        return (names ?? schemaCache.names).sorted()
    }

    /// Throws 119 unless `identity` may perform `op` on `className`.
    public func checkCLP(_ op: ClassOperation, _ className: String, _ identity: Identity) throws(ParseError) {
        if identity.isMaster { return }
        try ClassPermissions.check(op, className, identity, schema: schema(className))
    }

    /// Replaces the class-level permissions (creating the class if needed).
    public func setClassPermissions(_ className: String, _ clp: JSONObject) throws(ParseError) {
        try write { (tx) throws(ParseError) in
            var s = try lockedForChange(className, in: tx)
            let valid = try ClassPermissions.validate(clp)
            guard valid != s.clp else { return }
            s.clp = valid
            try stageSchema(s, in: tx)
        }
    }

    /// Declares indexes (Parse's `indexes` format, `IndexSpec`): ordered specs become expression
    /// indexes over `PostgresLayout.fieldExpr` (unique when asked: duplicates → 137), text specs
    /// a GIN index over the fields' text search vector, `2dsphere` nothing.
    public func setIndexes(_ className: String, _ specs: JSONObject) throws(ParseError) {
        try write { (tx) throws(ParseError) in
            var s = try lockedForChange(className, in: tx)
            let actions = try s.planIndexes(specs)
            guard !actions.isEmpty else { return }
            for a in actions {
                switch a {
                case .drop(let name, _):
                    try tx.connection.executeScript("DROP INDEX IF EXISTS \(Naming.indexName(className, name))")
                case .create(let spec):
                    if let ddl = PostgresLayout.indexDDL(className, spec, fields: s.fields) {
                        try tx.connection.executeScript(ddl)
                    }
                }
            }
            try stageSchema(s, in: tx)
        }
    }

    // MARK: internals (the write paths)

    func pendingSchemas(_ tx: PGTransaction) -> [String: ClassSchema] {
        tx.userInfo[Self.pendingSchemaKey] as? [String: ClassSchema] ?? [:]
    }

    /// Reads one class's row (with `lock`: `FOR UPDATE`, inside the caller's transaction) and
    /// caches it when read outside a transaction.
    func loadSchema(_ className: String, lock: Bool, on conn: PGConnection? = nil) throws(ParseError) -> ClassSchema? {
        let cacheable = pool.currentTransaction == nil && watch.isListening
        let generation = schemaCache.generation
        let read = { (c: PGConnection) throws(ParseError) -> ClassSchema? in
            let r = try c.execute("SELECT fields, indexes, clp FROM _mb_schema WHERE className = $1" + (lock ? " FOR UPDATE" : ""),
                                  [.text(className)])
            guard let row = r.rows.first else { return nil }
            let (fields, order) = ClassSchema.parseFields(try JSON.parse(Array((row[0].string ?? "{}").utf8)))
            let indexes = try JSON.parse(Array((row[1].string ?? "{}").utf8)).objectValue ?? [:]
            let clp = try JSON.parse(Array((row[2].string ?? "{}").utf8)).objectValue ?? [:]
            return ClassSchema(className: className, fields: fields, fieldOrder: order, indexes: indexes, clp: clp)
        }
        let s: ClassSchema?
        if let conn { s = try read(conn) } else { s = try pool.withConnection(read) }
        if let s, cacheable { schemaCache.put(s, ifGeneration: generation) }
        return s
    }

    /// Forgets this host's copies of the schemas (another host changed one).
    public func invalidateSchemas() { schemaCache.invalidate(nil) }

    /// Writes `schema`'s row in `tx` and stages it for the cache until commit.
    func stageSchema(_ schema: ClassSchema, in tx: PGTransaction) throws(ParseError) {
        try tx.connection.execute("""
            INSERT INTO _mb_schema(className, fields, indexes, clp) VALUES($1, $2, $3, $4)
            ON CONFLICT (className) DO UPDATE SET fields = excluded.fields, indexes = excluded.indexes, clp = excluded.clp
            """, [.text(schema.className), .text(JSONValue.object(schema.fieldsJSON).jsonString),
                  .text(JSONValue.object(schema.indexes).jsonString), .text(JSONValue.object(schema.clp).jsonString)])
        // Delivered at commit (once per class and transaction), to this host too.
        try tx.connection.execute("SELECT pg_notify($1, $2)", [.text(PGClusterWatch.schemaChannel), .text(schema.className)])
        var pending = tx.userInfo[Self.pendingSchemaKey] as? [String: ClassSchema]
        if pending == nil {
            pending = [:]
            let cache = schemaCache
            tx.onCommit { [weak tx] in
                guard let staged = tx?.userInfo[Self.pendingSchemaKey] as? [String: ClassSchema] else { return }
                for name in staged.keys { cache.invalidate(name) }
            }
        }
        pending![schema.className] = schema
        tx.userInfo[Self.pendingSchemaKey] = pending
    }

    /// The class's schema, creating its table and row on first use (any host's first use: a
    /// class another host made is found in `_mb_schema`).
    /// - Throws: 103 for an invalid class name.
    @discardableResult
    func ensureClass(_ className: String, in tx: PGTransaction) throws(ParseError) -> ClassSchema {
        if let s = pendingSchemas(tx)[className] { return s }
        try SchemaCatalog.validateClassName(className)
        if let s = schemaCache.get(className) { return s }
        if let s = try loadSchema(className, lock: false) { return s }
        // Takes the class's advisory lock until this transaction ends: a host creating the same
        // class meanwhile waits, then finds the row below.
        try PostgresLayout.ensureClassTable(className, pool: pool)
        if let s = try loadSchema(className, lock: true) { return s }
        let s = ClassSchema(className: className)
        try stageSchema(s, in: tx)
        return s
    }

    /// The class's schema as committed, locked for a change in `tx` (or as already changed by it).
    func lockedForChange(_ className: String, in tx: PGTransaction) throws(ParseError) -> ClassSchema {
        let s = try ensureClass(className, in: tx)
        if let p = pendingSchemas(tx)[className] { return p }
        return try loadSchema(className, lock: true) ?? s
    }

    /// Parse's first-value rule on PostgreSQL (`ClassSchema.addFields`): checked against this
    /// host's copy first (the common case: nothing new, no lock), then, when something is new,
    /// against the locked committed row. New Relation fields get their join tables; declared
    /// indexes over fields whose type is now known are rebuilt.
    /// - Throws: 111 on a type mismatch, 119 when CLP `addField` forbids a new field.
    @discardableResult
    func ensureFields(_ className: String, _ incoming: [(String, FieldInfo)], identity: Identity,
                      in tx: PGTransaction) throws(ParseError) -> ClassSchema {
        let known = try ensureClass(className, in: tx)
        var probe = known
        guard !(try probe.addFields(incoming, identity: identity)).isEmpty else { return known }
        var s = try lockedForChange(className, in: tx)
        let added = try s.addFields(incoming, identity: identity)
        guard !added.isEmpty else { return s }
        for (name, info) in added where info.type == .relation {
            guard let target = info.targetClass else { continue }
            if target != className { try ensureClass(target, in: tx) }
            try PostgresLayout.ensureRelationTable(owner: className, field: name, target: target, pool: pool)
        }
        // In this transaction, not beside it: it may already have written rows of the class,
        // and CREATE INDEX waits for such writers.
        for (name, info) in added where info.type == .geoPoint {
            try tx.connection.executeScript(PostgresLayout.geoIndexDDL(className, name))
        }
        for spec in s.indexesToRebuild(after: added) {
            try tx.connection.executeScript("DROP INDEX IF EXISTS \(Naming.indexName(className, spec.name))")
            if let ddl = PostgresLayout.indexDDL(className, spec, fields: s.fields) { try tx.connection.executeScript(ddl) }
        }
        try stageSchema(s, in: tx)
        return s
    }
}

/// This host's copies of the committed class schemas. A copy read from the database is kept
/// only if no invalidation happened since the read began (`generation`), so a slow reader never
/// caches a schema older than a change it was told about.
final class PGSchemaCache: Sendable {
    private struct State {
        var all: [String: ClassSchema] = [:]
        var generation: UInt64 = 0
    }
    private let state = Mutex(State())

    func get(_ className: String) -> ClassSchema? { state.withLock { $0.all[className] } }
    var generation: UInt64 { state.withLock { $0.generation } }
    var names: [String] { state.withLock { Array($0.all.keys) } }

    func put(_ s: ClassSchema, ifGeneration g: UInt64) {
        state.withLock { st in if st.generation == g { st.all[s.className] = s } }
    }

    /// Drops the copy of `className` (nil: every copy).
    func invalidate(_ className: String?) {
        state.withLock { st in
            st.generation &+= 1
            if let className { st.all[className] = nil } else { st.all.removeAll() }
        }
    }
}

extension PostgresLayout {
    /// The canonical SQL expression reading a field (dotted path allowed) of a class row on
    /// PostgreSQL, spelled identically by index DDL and queries so the planner uses the index: a
    /// Pointer by its objectId and a Date by its ISO text (both `text`, byte order), anything
    /// else by its `jsonb` value, a JSON `null` read as SQL NULL (as SQLite's `json_extract`
    /// does: a unique index then admits many objects without a value, null or missing);
    /// `objectId`, `createdAt`, `updatedAt` are columns. Names are validated before they get here.
    public static func fieldExpr(_ path: String, type: FieldType?) -> String {
        switch path {
        case "objectId", "createdAt", "updatedAt": return path
        default: break
        }
        let parts = path.split(separator: ".").joined(separator: ",")
        switch type {
        case .pointer?: return "((data #>> '{\(parts),objectId}') COLLATE \"C\")"
        case .date?: return "((data #>> '{\(parts),iso}') COLLATE \"C\")"
        default: return "NULLIF(data #> '{\(parts)}', 'null'::jsonb)"
        }
    }

    /// The text search vector of a text index's fields (`simple` configuration: no stemming).
    public static func textVector(_ fields: [String]) -> String {
        let parts = fields.map { "coalesce(data #>> '{\($0.split(separator: ".").joined(separator: ","))}', '')" }
        return "to_tsvector('simple'::regconfig, \(parts.joined(separator: " || ' ' || ")))"
    }

    /// The two indexes of a GeoPoint field (both with no extension: PostGIS is not needed):
    /// - a GiST index on the point (longitude, latitude) read from the document, PostgreSQL's own
    ///   `point` type and operator class: `$within`, `$geoWithin` and the bounding boxes of
    ///   `$nearSphere` and `$centerSphere` test `geoPoint(field) <@ box(…)` with the very same
    ///   expression, so the planner reads only the points in the boxes;
    /// - a B-tree on (`geoCellExpr`: the 0.05° grid cell of the point, createdAt, objectId), for
    ///   newest or oldest first within an area (`PostgresGeoCells`): a few index entries per cell
    ///   instead of every point of the area.
    static func geoIndexDDL(_ className: String, _ field: String) -> String {
        let t = Naming.table(className)
        return "CREATE INDEX IF NOT EXISTS \"\(className)__geo__\(field)\" ON \(t) USING gist (\(geoPoint(field)));\n"
            + "CREATE INDEX IF NOT EXISTS \"\(className)__geocell__\(field)\" ON \(t) (\(geoCellExpr(field)), createdAt, objectId COLLATE \"C\")"
    }

    /// The grid cell code of a row's point (NULL without a point), spelled identically by the
    /// cell index and the queries that use it (and by the migration step that adds the index to
    /// older databases): `floor((lat + 90) · 20) · 8192 + floor((lng + 180) · 20)`, the code
    /// `GeoCellPlan` computes with the same IEEE operations in Swift (both operands are
    /// non-negative, so floor and Swift's integer conversion agree).
    static func geoCellExpr(_ field: String) -> String {
        let (lat, lng) = QueryCompiler.pgLatLng(field)
        let n = Int(Naming.geoCellsPerDegree)
        return "(floor((\(lat) + 90) * \(n))::int8 * \(Naming.geoCellStride) + floor((\(lng) + 180) * \(n))::int8)"
    }

    /// `point(longitude, latitude)` of a GeoPoint field (NULL without a point), as the geo index
    /// and the queries spell it.
    static func geoPoint(_ field: String) -> String {
        let (lat, lng) = QueryCompiler.pgLatLng(field)
        return "point(\(lng), \(lat))"
    }

    /// `CREATE [UNIQUE] INDEX` for a declared spec, or nil for a geo-only spec.
    static func indexDDL(_ className: String, _ spec: IndexSpec, fields: [String: FieldInfo]) -> String? {
        let name = Naming.indexName(className, spec.name)
        if spec.isText {
            return "CREATE INDEX IF NOT EXISTS \(name) ON \(Naming.table(className)) USING gin (\(textVector(spec.fields.map(\.path))))"
        }
        guard !spec.isGeoOnly else { return nil }
        let cols = spec.fields.map { f -> String in
            let type = f.path.contains(".") ? nil : fields[f.path]?.type
            return fieldExpr(f.path, type: type) + (f.descending ? " DESC" : "")
        }.joined(separator: ", ")
        return "CREATE \(spec.unique ? "UNIQUE " : "")INDEX IF NOT EXISTS \(name) ON \(Naming.table(className))(\(cols))"
    }

    /// The join table of a Relation field (`"_mb_join:Owner:field"`, as on SQLite) and the
    /// triggers that remove an owner's rows and a member's rows when either is deleted, on every
    /// delete path. Made under the owner's class lock (hosts may race to make it).
    static func ensureRelationTable(owner: String, field: String, target: String, pool: PGPool) throws(ParseError) {
        let j = Naming.joinTable(owner, field)
        let raw = "_mb_join:\(owner):\(field)"
        let ddl = """
            CREATE TABLE IF NOT EXISTS \(j)(owningId text NOT NULL, relatedId text NOT NULL, PRIMARY KEY(owningId, relatedId));
            CREATE INDEX IF NOT EXISTS "\(raw)__related" ON \(j)(relatedId);
            CREATE OR REPLACE TRIGGER "\(raw)__owner_ad" AFTER DELETE ON \(Naming.table(owner))
              FOR EACH ROW EXECUTE FUNCTION _mb_join_cleanup('\(raw)', 'owningid');
            CREATE OR REPLACE TRIGGER "\(raw)__target_ad" AFTER DELETE ON \(Naming.table(target))
              FOR EACH ROW EXECUTE FUNCTION _mb_join_cleanup('\(raw)', 'relatedid');
            """
        try pool.transaction(isolation: .readCommitted) { (tx) throws(ParseError) in
            try tx.connection.execute("SELECT pg_advisory_xact_lock($1::int, hashtext($2))",
                                      [.integer(classLockSpace), .text(owner)])
            try tx.connection.executeScript(ddl)
        }
    }
}
