import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import MoonbaseSQLite

/// The query side of `DocumentStore` on PostgreSQL: `find`, `count`, `distinct`.
///
/// Where clauses go through the shared `QueryCompiler` (same operators, validation, limits and
/// error codes as SQLite) in its PostgreSQL dialect; this file adds the statement around it: the
/// ACL read filter (`rperm && $n::text[]`), pointer permissions, order, limit and skip, and the
/// row to Parse JSON step (hidden fields removed by the shared `ProtectedFields` rule).
///
/// Differences from SQLite (docs/DECISIONS.md): results without `order` come in the server's order (not insertion order); a field's values of
/// mixed JSON types sort in jsonb's type order.
extension PostgresStore {
    public func find(_ q: FindQuery, identity: Identity, afterFind givenHook: AfterFindHook?,
                     afterFindApplies: ((String) -> Bool)?) throws(ParseError) -> FindResult {
        let (afterFind, mainHook) = QueryExecutor.scopedAfterFind(givenHook, applies: afterFindApplies, mainClass: q.className)
        try Naming.requireValidClassName(q.className)
        try ProtectedFields.check(q.className, where: q.whereClause, order: q.order, identity: identity)
        return try pool.withConnection { (conn) throws(ParseError) -> FindResult in
            guard let schema = try lookupSchema(q.className, on: conn) else {
                // Parse answers an empty list for a class that has no objects yet.
                _ = try PostgresQuery.compiler(QuerySchema(className: q.className, fields: [:]), identity: identity, store: self, on: conn).compile(q.whereClause)
                return FindResult(results: Array("[]".utf8), resultCount: 0, count: q.count ? 0 : nil)
            }
            let (w, compiled) = try PostgresQuery.filter(schema, q.whereClause, q.operation, identity, store: self, on: conn)
            let table = Naming.table(q.className)
            var count: Int?
            if q.count {
                count = try PostgresQuery.count(table, w, on: conn)
            }
            let order = try PostgresQuery.orderBy(q.order, schema: schema.querySchema, compiled: compiled)
            if q.limit == 0 { return FindResult(results: Array("[]".utf8), resultCount: 0, count: count) }
            let statement: QueryCompiler.Frag
            if let geo = compiled.geo, let cells = PostgresGeoCells.statement(
                className: q.className, geo: geo, order: q.order,
                filter: QueryCompiler.pgFinal(QueryCompiler.pgAnd([QueryCompiler.Frag(compiled.residualSQL, compiled.residualBinds)]
                    + PostgresQuery.readConditions(schema, q.operation, identity))),
                limit: q.limit, skip: q.skip) {
                statement = cells
            } else {
                var sql = "SELECT t.objectId, t.createdAt, t.updatedAt, t.acl, t.data FROM \(table) t WHERE \(w.sql)"
                var binds = w.binds
                if let order {
                    sql += " ORDER BY " + order.sql
                    binds += order.binds
                }
                sql += " LIMIT \(QueryCompiler.pgMark)::bigint OFFSET \(QueryCompiler.pgMark)::bigint"
                statement = QueryCompiler.Frag(sql, binds + [.integer(Int64(q.limit)), .integer(Int64(q.skip))])
            }
            let res = try PostgresQuery.run(statement.sql, statement.binds, on: conn)
            var objects: [JSONObject] = []
            objects.reserveCapacity(res.rows.count)
            for row in res.rows { objects.append(try PostgresQuery.object(row, className: q.className, identity: identity)) }
            if !q.include.isEmpty {
                var expander = IncludeExpander(afterFind: afterFind) { (cls: String, ids: [String]) throws(ParseError) -> [JSONObject] in
                    try PostgresQuery.fetchByIds(cls, ids, identity: identity, store: self, on: conn)
                }
                try expander.expand(&objects, paths: q.include)
            }
            return try QueryExecutor.finish(objects, q, count: count, afterFind: mainHook ? afterFind : nil)
        }
    }

    public func count(_ className: String, where w: JSONValue?, identity: Identity) throws(ParseError) -> Int {
        try ProtectedFields.check(className, where: w, identity: identity)
        try Naming.requireValidClassName(className)
        return try pool.withConnection { (conn) throws(ParseError) -> Int in
            guard let schema = try lookupSchema(className, on: conn) else { return 0 }
            let (f, _) = try PostgresQuery.filter(schema, w, .count, identity, store: self, on: conn)
            return try PostgresQuery.count(Naming.table(className), f, on: conn)
        }
    }

    /// Distinct values of `field` among matching readable objects (array fields unwound; missing
    /// and null values left out), as on SQLite.
    public func distinct(_ className: String, field: String, where w: JSONValue?, identity: Identity) throws(ParseError) -> [JSONValue] {
        try ProtectedFields.check(className, where: w, field: field, identity: identity)
        try Naming.requireValidClassName(className)
        return try pool.withConnection { (conn) throws(ParseError) -> [JSONValue] in
            guard let schema = try lookupSchema(className, on: conn) else { return [] }
            let (f, _) = try PostgresQuery.filter(schema, w, .find, identity, store: self, on: conn)
            let ref = try FieldRef(path: field, schema: schema.querySchema)
            let table = Naming.table(className)
            let sql: String
            switch ref.kind {
            case .objectId: sql = "SELECT DISTINCT t.objectId FROM \(table) t WHERE \(f.sql)"
            case .time: sql = "SELECT DISTINCT t.\(field) FROM \(table) t WHERE \(f.sql)"
            case .json where ref.declared == .array:
                sql = "SELECT DISTINCT v FROM \(table) t, \(QueryCompiler.pgElements(field)) WHERE v <> 'null'::jsonb AND \(f.sql)"
            case .json:
                let e = QueryCompiler.pgJSON(field)
                sql = "SELECT DISTINCT \(e) FROM \(table) t WHERE \(e) IS NOT NULL AND \(e) <> 'null'::jsonb AND \(f.sql)"
            }
            var out: [JSONValue] = []
            for row in try PostgresQuery.run(sql, f.binds, on: conn).rows {
                switch row.values.first {
                case .text(let s)?: out.append(.string(s))
                case .integer(let ms)?: out.append(["__type": "Date", "iso": .string(ISO8601.format(millis: ms))])
                case .json(let b)?: out.append(try JSON.parse(b))
                default: break
                }
            }
            return out
        }
    }
}

/// The PostgreSQL statement parts of the query side (see `PostgresStore.find`).
enum PostgresQuery {
    static func compiler(_ schema: QuerySchema, identity: Identity, store: PostgresStore, on conn: PGConnection) -> QueryCompiler {
        let ctx = SubqueryContext(identity: identity) { (cls: String) throws(ParseError) -> ClassSchema? in
            try store.lookupSchema(cls, on: conn)
        }
        return QueryCompiler(schema: schema, subqueries: ctx, dialect: .postgres)
    }

    /// The compiled `where` AND the read filter of `identity` (ACL and pointer permissions).
    static func filter(_ schema: ClassSchema, _ whereClause: JSONValue?, _ op: ClassOperation,
                       _ identity: Identity, store: PostgresStore, on conn: PGConnection) throws(ParseError) -> (QueryCompiler.Frag, CompiledWhere) {
        let c = try compiler(schema.querySchema, identity: identity, store: store, on: conn).compile(whereClause)
        let parts = [QueryCompiler.Frag(c.sql, c.binds)] + readConditions(schema, op, identity)
        return (QueryCompiler.pgFinal(QueryCompiler.pgAnd(parts)), c)
    }

    /// The read filter of `identity` beside the `where`: the ACL and pointer permissions.
    static func readConditions(_ schema: ClassSchema, _ op: ClassOperation, _ identity: Identity) -> [QueryCompiler.Frag] {
        var parts: [QueryCompiler.Frag] = []
        if let acl = aclFilter(identity) { parts.append(acl) }
        if case .pointerFields(let fields) = ClassPermissions.access(schema.clp, op, identity), let uid = identity.userId {
            parts.append(pointerCondition(fields, userId: uid))
        }
        return parts
    }

    /// Public rows, or rows whose readers include `*`, the user or one of its roles: one overlap
    /// test with the principals bound as one `text[]`.
    static func aclFilter(_ identity: Identity) -> QueryCompiler.Frag? {
        if identity.isMaster { return nil }
        let principals = ["*"] + ACLs.principals(identity)
        return QueryCompiler.Frag("(t.rperm IS NULL OR t.rperm && \(QueryCompiler.pgMark)::text[])", [.text(arrayLiteral(principals))])
    }

    /// `{"a","b"}`: a PostgreSQL array literal, every element quoted and escaped.
    static func arrayLiteral(_ items: [String]) -> String {
        var s = "{"
        for (i, item) in items.enumerated() {
            if i > 0 { s += "," }
            s += "\""
            for c in item.unicodeScalars {
                if c == "\"" || c == "\\" { s += "\\" }
                s.unicodeScalars.append(c)
            }
            s += "\""
        }
        return s + "}"
    }

    /// `ClassPermissions.pointerCondition` in PostgreSQL's spelling: one of `fields` is a Pointer
    /// to `userId` or an array holding one.
    static func pointerCondition(_ fields: [String], userId: String) -> QueryCompiler.Frag {
        var parts: [QueryCompiler.Frag] = []
        for f in fields where Naming.isValidFieldName(f) {
            parts.append(QueryCompiler.Frag(
                "(CASE jsonb_typeof(\(QueryCompiler.pgJSON(f))) WHEN 'array' THEN EXISTS(SELECT 1 FROM \(QueryCompiler.pgElements(f)) "
                    + "WHERE v ->> 'objectId' = \(QueryCompiler.pgMark)::text) WHEN 'object' THEN \(QueryCompiler.pgText(f, "objectId")) = \(QueryCompiler.pgMark)::text ELSE FALSE END)",
                [.text(userId), .text(userId)]))
        }
        return QueryCompiler.pgFinal(QueryCompiler.pgOr(parts))
    }

    /// `ORDER BY` terms, or nil. Text keys sort by bytes (`COLLATE "C"`); missing values sort
    /// first ascending and last descending, as SQLite's NULLs do. Ties on a time key are broken
    /// by objectId so pages are deterministic.
    static func orderBy(_ order: [SortKey], schema: QuerySchema, compiled: CompiledWhere) throws(ParseError) -> QueryCompiler.Frag? {
        var terms: [String] = []
        var binds: [SQLiteValue] = []
        for key in order {
            let dir = key.descending ? " DESC NULLS LAST" : " NULLS FIRST"
            switch key.field {
            case "objectId": terms.append("t.objectId COLLATE \"C\"" + (key.descending ? " DESC" : ""))
            case "createdAt", "updatedAt": terms.append("t.\(key.field)" + (key.descending ? " DESC" : ""))
            case "$score":
                // Best match first, as SQLite's bm25 (lower is better) sorts ascending.
                guard let text = compiled.text else { throw ParseError(.invalidQuery, "order by $score needs a $text constraint") }
                terms.append("-ts_rank(\(text.ftsTable), to_tsquery('simple'::regconfig, \(QueryCompiler.pgMark)::text))" + (key.descending ? " DESC" : ""))
                binds.append(.text(text.match))
            default:
                let type = key.field.contains(".") ? nil : schema.fields[key.field]?.type
                switch type {
                case .geoPoint?, .relation?, .acl?:
                    throw ParseError(.invalidQuery, "cannot order by \(key.field): it is a \(type!.rawValue)")
                case .pointer?: terms.append(QueryCompiler.pgText(key.field, "objectId") + " COLLATE \"C\"" + dir)
                case .date?: terms.append(QueryCompiler.pgText(key.field, "iso") + " COLLATE \"C\"" + dir)
                case .string?: terms.append(QueryCompiler.pgText(key.field) + " COLLATE \"C\"" + dir)
                default: terms.append(QueryCompiler.pgJSON(key.field) + dir)
                }
            }
        }
        // `$nearSphere` sorts nearest first unless `order` is given.
        if order.isEmpty, let geo = compiled.geo, let c = geo.center {
            terms.append(QueryCompiler.pgDistance(geo.field))
            binds += [.real(c.latitude), .real(c.latitude), .real(c.longitude)]
        }
        guard !terms.isEmpty else { return nil }
        if let last = order.last, last.field == "createdAt" || last.field == "updatedAt" {
            terms.append("t.objectId COLLATE \"C\"" + (last.descending ? " DESC" : ""))
        }
        return QueryCompiler.Frag(terms.joined(separator: ", "), binds)
    }

    /// The objects of `className` among `ids` that `identity` may `get` (class permission, ACL,
    /// pointer permissions), for `include`; none when the class does not exist.
    static func fetchByIds(_ className: String, _ ids: [String], identity: Identity, store: PostgresStore, on conn: PGConnection) throws(ParseError) -> [JSONObject] {
        guard Naming.isValidClassName(className) else { return [] }
        if !identity.isMaster && ClassPermissions.masterOnlyClasses.contains(className) { return [] }
        guard let schema = try store.lookupSchema(className, on: conn) else { return [] }
        guard identity.isMaster || ClassPermissions.allows(schema.clp, .get, identity) else { return [] }
        let (f, _) = try filter(schema, nil, .get, identity, store: store, on: conn)
        var out: [JSONObject] = []
        var start = 0
        while start < ids.count {
            let chunk = Array(ids[start..<min(ids.count, start + IncludeExpander.batch)])
            start += IncludeExpander.batch
            let sql = "SELECT t.objectId, t.createdAt, t.updatedAt, t.acl, t.data FROM \(Naming.table(className)) t "
                + "WHERE t.objectId = ANY(\(QueryCompiler.pgMark)::text[]) AND \(f.sql)"
            for row in try run(sql, [.text(arrayLiteral(chunk))] + f.binds, on: conn).rows {
                out.append(try object(row, className: className, identity: identity))
            }
        }
        return out
    }

    /// The objectIds of `className` matching `where` that `identity` may change with `op`
    /// (`.update`/`.delete`: the ACL's writers and pointer permissions), locked `FOR UPDATE` for
    /// the surrounding transaction: the query half of `deleteWhere`/`updateWhere`.
    static func writableIds(_ className: String, where whereClause: JSONValue?, op: ClassOperation, identity: Identity,
                            store: PostgresStore, on conn: PGConnection) throws(ParseError) -> [String] {
        try Naming.requireValidClassName(className)
        guard let schema = try store.lookupSchema(className, on: conn) else { return [] }
        let c = try compiler(schema.querySchema, identity: identity, store: store, on: conn).compile(whereClause)
        var parts = [QueryCompiler.Frag(c.sql, c.binds)]
        if !identity.isMaster {
            let principals = ["*"] + ACLs.principals(identity)
            parts.append(QueryCompiler.Frag("(t.wperm IS NULL OR t.wperm && \(QueryCompiler.pgMark)::text[])", [.text(arrayLiteral(principals))]))
        }
        if case .pointerFields(let fields) = ClassPermissions.access(schema.clp, op, identity), let uid = identity.userId {
            parts.append(pointerCondition(fields, userId: uid))
        }
        let w = QueryCompiler.pgFinal(QueryCompiler.pgAnd(parts))
        // Creation order, as SQLite's rowid order visits them: a bulk write's change events (and
        // so its realtime events) come in the same order on both backends. A total order also
        // makes concurrent bulk writes lock rows in the same sequence (no deadlock between them).
        let r = try run("SELECT t.objectId FROM \(Naming.table(className)) t WHERE \(w.sql) ORDER BY t.createdAt, t.objectId FOR UPDATE",
                        w.binds, on: conn)
        return r.rows.compactMap { $0.values.first?.string }
    }

    static func count(_ table: String, _ w: QueryCompiler.Frag, on conn: PGConnection) throws(ParseError) -> Int {
        let r = try run("SELECT count(*) FROM \(table) t WHERE \(w.sql)", w.binds, on: conn)
        return Int(r.scalar?.int64 ?? 0)
    }

    /// Runs a statement written with `QueryCompiler.pgMark` placeholders.
    static func run(_ sql: String, _ binds: [SQLiteValue], on conn: PGConnection) throws(ParseError) -> PGResult {
        do throws(ParseError) {
            return try conn.execute(numbered(sql), binds.map(pgValue))
        } catch {
            // An invalid `$regex` pattern is the query's fault, as on SQLite.
            if error.message.contains("invalid regular expression") {
                throw ParseError(.invalidQuery, "invalid $regex: \(error.message)")
            }
            throw error
        }
    }

    /// `sql` with each `QueryCompiler.pgMark` replaced by `$1`, `$2`, … in text order (the order
    /// of the binds).
    static func numbered(_ sql: String) -> String {
        var out = ""
        out.reserveCapacity(sql.utf8.count + 16)
        var n = 0
        for c in sql.unicodeScalars {
            if c == "\u{1}" {
                n += 1
                out += "$\(n)"
            } else {
                out.unicodeScalars.append(c)
            }
        }
        return out
    }

    static func pgValue(_ v: SQLiteValue) -> PGValue {
        switch v {
        case .null: return .null
        case .integer(let n): return .integer(n)
        case .real(let d): return .real(d)
        case .text(let s): return .text(s)
        case .blob(let b): return .text(String(decoding: b, as: UTF8.self))
        }
    }

    /// A class row (`objectid, createdat, updatedat, acl, data`) as Parse JSON, hidden fields
    /// removed for `identity` (`ProtectedFields.hides`, the rule SQLite's rows go through).
    static func object(_ row: PGRow, className: String, identity: Identity) throws(ParseError) -> JSONObject {
        let v = row.values
        let objectId = v[0].string ?? ""
        var o = JSONObject()
        o["objectId"] = .string(objectId)
        o["createdAt"] = .string(ISO8601.format(millis: v[1].int64 ?? 0))
        o["updatedAt"] = .string(ISO8601.format(millis: v[2].int64 ?? 0))
        if case .json(let acl) = v[3] { o["ACL"] = try JSON.parse(acl) }
        if case .json(let data) = v[4] {
            for e in try JSON.parse(data).objectValue ?? [:]
            where !ProtectedFields.hides(e.key, className: className, objectId: objectId, viewer: identity) {
                o.entries.append(JSONObject.Entry(e.key, e.value))
            }
        }
        return o
    }
}
