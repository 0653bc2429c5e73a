import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// Where the query side learns a class's schema. The store's schema catalog conforms.
public protocol QuerySchemaSource {
    /// The class's query schema, or nil when the class does not exist (no table yet).
    func querySchema(_ className: String, on conn: Connection) throws(ParseError) -> QuerySchema?
    /// Whether `identity` may fetch objects of `className` by id (its class-level `get`
    /// permission); `include` leaves pointers into classes it may not as Pointers.
    func allowsGet(_ className: String, identity: Identity) -> Bool
    /// Throws 119 unless `identity` may find objects of `className` (inner queries).
    func checkFind(_ className: String, identity: Identity) throws(ParseError)
    /// The pointer-permission condition limiting `op` on `className` to the caller's objects
    /// (`ClassPermissions.pointerCondition`), or nil when the caller is not limited that way.
    func readRestriction(_ className: String, _ op: ClassOperation, identity: Identity) -> (sql: String, binds: [SQLiteValue])?
}

extension QuerySchemaSource {
    /// Without class-level permissions: only the master-only system classes are refused.
    public func allowsGet(_ className: String, identity: Identity) -> Bool {
        identity.isMaster || !ClassPermissions.masterOnlyClasses.contains(className)
    }

    public func checkFind(_ className: String, identity: Identity) throws(ParseError) {
        if !identity.isMaster && ClassPermissions.masterOnlyClasses.contains(className) {
            throw ParseError(.operationForbidden, "unauthorized: master key is required")
        }
    }

    public func readRestriction(_ className: String, _ op: ClassOperation, identity: Identity) -> (sql: String, binds: [SQLiteValue])? { nil }
}

/// Lua/REST `afterFind`: may edit or drop objects of a class before they are returned.
public typealias AfterFindHook = (_ className: String, _ objects: [JSONObject]) throws(ParseError) -> [JSONObject]

/// The answer of a find: the results as a JSON array (bytes, ready to splice into a response or
/// hand to Lua) and the count when asked.
public struct FindResult: Sendable {
    /// A JSON array of Parse objects.
    public var results: [UInt8]
    /// Number of objects in `results`.
    public var resultCount: Int
    /// Total matching objects when `count` was asked.
    public var count: Int?

    /// `{"results":[…],"count":N}` (count only when asked).
    public func responseBody() -> [UInt8] {
        var w = JSONWriter(capacity: results.count + 32)
        w.raw("{\"results\":")
        w.raw(results)
        if let count {
            w.raw(",\"count\":")
            w.int(Int64(count))
        }
        w.byte(UInt8(ascii: "}"))
        return w.bytes
    }

    /// The results parsed into objects.
    public func objects() throws(ParseError) -> [JSONObject] {
        (try JSON.parse(results).arrayValue ?? []).compactMap(\.objectValue)
    }
}

/// Runs finds, counts and distincts on one connection (thread-confined, like the connection).
///
/// ```swift
/// let q = try FindQuery(className: "Post", rest: ["where": #"{"likes":{"$gt":3}}"#, "order": "-createdAt"])
/// let r = try QueryExecutor(schemas: catalog).find(q, identity: .anonymous, on: conn)
/// response.body = r.responseBody()
/// ```
public struct QueryExecutor {
    public let schemas: any QuerySchemaSource
    public init(schemas: any QuerySchemaSource) { self.schemas = schemas }

    /// Compiles and runs `q` for `identity` (non-master callers see only rows they may read).
    ///
    /// Without `include`, `keys` or `afterFind`, rows are written by splicing the stored `data`
    /// text (no parse/encode). Otherwise rows are parsed; includes are expanded (ACL-checked,
    /// `afterFind` applied to each included class), `keys` projects, then `afterFind` runs on
    /// the results. `afterFind` is the caller's choice: pass nil for master-key reads.
    /// `afterFindApplies` tells which classes have an `afterFind` trigger: classes without one
    /// skip the hook, so a plain find on them keeps the spliced fast path.
    /// - Throws: 102/105/111 for bad queries (see `QueryCompiler`), 1 for storage failures.
    public func find(_ q: FindQuery, identity: Identity, on conn: Connection, afterFind givenHook: AfterFindHook? = nil,
                     afterFindApplies: ((String) -> Bool)? = nil) throws(ParseError) -> FindResult {
        let (afterFind, mainHook) = QueryExecutor.scopedAfterFind(givenHook, applies: afterFindApplies, mainClass: q.className)
        try Naming.requireValidClassName(q.className)
        try ProtectedFields.check(q.className, where: q.whereClause, order: q.order, identity: identity)
        guard let schema = try schemas.querySchema(q.className, on: conn) else {
            // Parse answers an empty list for a class that has no objects yet.
            _ = try QueryCompiler(schema: QuerySchema(className: q.className, fields: [:]),
                                  subqueries: SubqueryContext(schemas: schemas, identity: identity, conn: conn)).compile(q.whereClause)
            return FindResult(results: Array("[]".utf8), resultCount: 0, count: q.count ? 0 : nil)
        }
        let compiled = try QueryCompiler(schema: schema, subqueries: SubqueryContext(schemas: schemas, identity: identity, conn: conn))
            .compile(q.whereClause)
        let builder = SelectBuilder(schema: schema, compiled: compiled, acl: readFilter(q.className, q.operation, identity))
        var count: Int?
        if q.count {
            let c = builder.count()
            if case .integer(let n)? = try conn.scalar(c.sql, c.binds) { count = Int(n) }
        }
        if q.limit == 0 {
            _ = try builder.orderBy(q.order)  // still validate order
            return FindResult(results: Array("[]".utf8), resultCount: 0, count: count)
        }
        let simple = q.include.isEmpty && q.keys == nil && q.excludeKeys.isEmpty && !mainHook && RowSerializer.canSplice(q.className)
        // A geo find may run many statements (the planner's probes, a cell plan's twenty cells,
        // the page's rows): one read transaction for them all. Hooks and includes run after it.
        let rows = try compiled.geo == nil
            ? planAndFetch(q, builder: builder, simple: simple, count: count, identity: identity, on: conn)
            : conn.inReadTransaction { () throws(ParseError) in
                try planAndFetch(q, builder: builder, simple: simple, count: count, identity: identity, on: conn)
            }
        var objects: [JSONObject]
        switch rows {
        case .page(let page): return page
        case .objects(let o): objects = o
        }
        if !q.include.isEmpty {
            var expander = IncludeExpander(schemas: schemas, identity: identity, conn: conn, afterFind: afterFind)
            try expander.expand(&objects, paths: q.include)
        }
        return try QueryExecutor.finish(objects, q, count: count, afterFind: mainHook ? afterFind : nil)
    }

    /// The rows of a find: the finished page when rows are spliced, else the objects.
    enum Fetched {
        case page(FindResult)
        case objects([JSONObject])
    }

    /// Plans `q` and reads its rows (no includes, no hooks).
    func planAndFetch(_ q: FindQuery, builder: SelectBuilder, simple: Bool, count: Int?, identity: Identity,
                      on conn: Connection) throws(ParseError) -> Fetched {
        let choice = try GeoPlanner.plan(builder: builder, order: q.order, limit: q.limit, skip: q.skip, on: conn)
        if simple, case .select(.candidates(let ids)) = choice, q.order.count == 1, q.order[0].field == "createdAt" {
            return .page(try Self.candidatesPage(builder.candidatesUnordered(ids), descending: q.order[0].descending,
                                                 limit: q.limit, skip: q.skip, count: count, on: conn))
        }
        var w = JSONWriter(capacity: simple ? 4096 : 0)
        var n = 0
        var objects: [JSONObject] = []
        func row(_ s: Statement) throws(ParseError) {
            if simple {
                w.byte(n == 0 ? UInt8(ascii: "[") : UInt8(ascii: ","))
                RowSerializer.writeSpliced(s, into: &w)
            } else {
                objects.append(try RowSerializer.object(s, className: q.className, identity: identity))
            }
            n += 1
        }
        switch choice {
        case .rids(let rids): try SelectBuilder.rowsByRid(builder.schema.className, rids, on: conn, row)
        case .select(let plan):
            let stmt = try builder.select(plan: plan, order: q.order, limit: q.limit, skip: q.skip)
            try conn.query(stmt.sql, stmt.binds, row: row)
        }
        guard simple else { return .objects(objects) }
        if n == 0 { w.byte(UInt8(ascii: "[")) }
        w.byte(UInt8(ascii: "]"))
        return .page(FindResult(results: w.bytes, resultCount: n, count: count))
    }

    /// A page of `GeoPlan.candidates` rows (`SelectBuilder.candidatesUnordered`) in createdAt
    /// order, ties by rid in the same direction (the order `ORDER BY t.createdAt, t.rid` gives),
    /// sorted here rather than by SQLite. The planner picks this plan only for few hits (below
    /// the cell plan's break-even count), and SQLite's `ORDER BY … LIMIT` kept them in an
    /// ephemeral B-tree created, filled and dropped on every query: about 50,000 instructions of
    /// a map query's 460,000 (W3s, callgrind), against a few hundred for this sort.
    static func candidatesPage(_ stmt: QueryCompiler.Frag, descending: Bool, limit: Int, skip: Int, count: Int?,
                               on conn: Connection) throws(ParseError) -> FindResult {
        var rows = JSONWriter(capacity: 4096)
        var keys: [(createdAt: Int64, rid: Int64, start: Int, end: Int)] = []
        try conn.query(stmt.sql, stmt.binds) { (s) throws(ParseError) in
            let start = rows.bytes.count
            RowSerializer.writeSpliced(s, into: &rows)
            keys.append((s.int64(1), s.int64(5), start, rows.bytes.count))
        }
        if descending {
            keys.sort { ($0.createdAt, $0.rid) > ($1.createdAt, $1.rid) }
        } else {
            keys.sort { ($0.createdAt, $0.rid) < ($1.createdAt, $1.rid) }
        }
        let from = min(skip, keys.count)
        let to = limit >= keys.count - from ? keys.count : from + limit
        var w = JSONWriter(capacity: rows.bytes.count + 2)
        w.byte(UInt8(ascii: "["))
        rows.bytes.withUnsafeBufferPointer { all in
            for (i, k) in keys[from..<to].enumerated() {
                if i > 0 { w.byte(UInt8(ascii: ",")) }
                w.raw(UnsafeBufferPointer(rebasing: all[k.start..<k.end]))
            }
        }
        w.byte(UInt8(ascii: "]"))
        return FindResult(results: w.bytes, resultCount: to - from, count: count)
    }

    /// `afterFind` limited to the classes `applies` names (every class when nil), and whether it
    /// runs on the queried class's own results (`mainClass`), on either backend.
    static func scopedAfterFind(_ hook: AfterFindHook?, applies: ((String) -> Bool)?,
                                mainClass: String) -> (hook: AfterFindHook?, main: Bool) {
        guard let hook else { return (nil, false) }
        guard let applies else { return (hook, true) }
        let scoped: AfterFindHook = { (cls: String, objs: [JSONObject]) throws(ParseError) -> [JSONObject] in
            if applies(cls) { return try hook(cls, objs) }
            return objs
        }
        return (scoped, applies(mainClass))
    }

    /// The last steps of a find on either backend, once rows are objects and includes are
    /// expanded: `keys` / `excludeKeys` projection, the class's afterFind hook, the JSON array.
    static func finish(_ rows: [JSONObject], _ q: FindQuery, count: Int?, afterFind: AfterFindHook?) throws(ParseError) -> FindResult {
        var objects = rows
        if let keys = q.keys {
            // Included pointers are kept whole unless `keys` names some of their fields.
            let implied = q.include.filter { inc in !keys.contains { $0 == inc || $0.hasPrefix(inc + ".") } }
            let tree = KeyTree(keys + implied)
            objects = objects.map { tree.project($0) }
        }
        if !q.excludeKeys.isEmpty {
            let paths = q.excludeKeys.map { $0.split(separator: ".").map(String.init) }
            objects = objects.map { o in paths.reduce(o) { QueryExecutor.removing($1[...], from: $0) } }
        }
        if let afterFind { objects = try afterFind(q.className, objects) }
        var w = JSONWriter(capacity: 4096)
        w.write(.array(objects.map { .object($0) }))
        return FindResult(results: w.bytes, resultCount: objects.count, count: count)
    }

    /// The read filter for `identity` on `className`: its ACL condition, AND the pointer
    /// permissions' condition when class permissions limit it to its own objects.
    func readFilter(_ className: String, _ op: ClassOperation, _ identity: Identity) -> QueryCompiler.Frag? {
        var conds: [QueryCompiler.Frag] = []
        if let acl = SelectBuilder.aclFilter(identity) { conds.append(acl) }
        if let r = schemas.readRestriction(className, op, identity: identity) { conds.append(QueryCompiler.Frag(r.sql, r.binds)) }
        return conds.isEmpty ? nil : QueryCompiler.and(conds)
    }

    /// `o` without the field at `path` (dotted paths reach into included objects). The object's
    /// identity (`objectId`, `className`, `__type`) is never removed.
    static func removing(_ path: ArraySlice<String>, from o: JSONObject) -> JSONObject {
        guard let first = path.first, !["objectId", "className", "__type"].contains(first) else { return o }
        var out = o
        if path.count == 1 {
            _ = out.removeValue(forKey: first)
        } else if let inner = o[first]?.objectValue {
            out[first] = .object(removing(path.dropFirst(), from: inner))
        }
        return out
    }

    /// Number of objects matching `where` that `identity` may read.
    public func count(className: String, where whereClause: JSONValue?, identity: Identity, on conn: Connection) throws(ParseError) -> Int {
        try ProtectedFields.check(className, where: whereClause, identity: identity)
        try Naming.requireValidClassName(className)
        guard let schema = try schemas.querySchema(className, on: conn) else { return 0 }
        let compiled = try QueryCompiler(schema: schema, subqueries: SubqueryContext(schemas: schemas, identity: identity, conn: conn))
            .compile(whereClause)
        let c = SelectBuilder(schema: schema, compiled: compiled, acl: readFilter(className, .count, identity)).count()
        guard case .integer(let n)? = try conn.scalar(c.sql, c.binds) else { return 0 }
        return Int(n)
    }

    /// Distinct values of `field` among matching readable objects (array fields are unwound,
    /// as Parse/Mongo do); missing and null values are left out.
    public func distinct(className: String, field: String, where whereClause: JSONValue?, identity: Identity,
                         on conn: Connection) throws(ParseError) -> [JSONValue] {
        try ProtectedFields.check(className, where: whereClause, field: field, identity: identity)
        try Naming.requireValidClassName(className)
        guard let schema = try schemas.querySchema(className, on: conn) else { return [] }
        let compiled = try QueryCompiler(schema: schema, subqueries: SubqueryContext(schemas: schemas, identity: identity, conn: conn))
            .compile(whereClause)
        let ref = try FieldRef(path: field, schema: schema)
        var conds = [QueryCompiler.Frag(compiled.sql, compiled.binds)]
        if let acl = readFilter(className, .find, identity) { conds.append(acl) }
        let w = QueryCompiler.and(conds)
        let table = Naming.table(className)
        let sql: String
        switch ref.kind {
        case .objectId: sql = "SELECT DISTINCT json_quote(t.objectId) FROM \(table) t WHERE \(w.sql)"
        case .time:
            sql = "SELECT DISTINCT json_object('__type','Date','iso',strftime('%Y-%m-%dT%H:%M:%fZ', t.\(field)/1000.0, 'unixepoch')) FROM \(table) t WHERE \(w.sql)"
        case .json where ref.declared == .array:
            sql = """
                SELECT DISTINCT CASE j.type WHEN 'object' THEN j.value WHEN 'array' THEN j.value \
                WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE json_quote(j.value) END \
                FROM \(table) t, json_each(t.data,\(ref.jsonPath)) j WHERE j.type != 'null' AND \(w.sql)
                """
        case .json:
            sql = "SELECT DISTINCT t.data -> \(ref.jsonPath) AS v FROM \(table) t WHERE v IS NOT NULL AND v != 'null' AND \(w.sql)"
        }
        var out: [JSONValue] = []
        try conn.query(sql, w.binds) { (s) throws(ParseError) in
            let v = try s.withBytes(0) { (b: UnsafeBufferPointer<UInt8>) throws(ParseError) -> JSONValue in try JSON.parse(b) }
            out.append(v)
        }
        return out
    }
}
