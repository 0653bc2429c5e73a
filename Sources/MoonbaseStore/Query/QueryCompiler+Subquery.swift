import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// What a query needs to look into other classes (`$inQuery`, `$notInQuery`, `$select`,
/// `$dontSelect`, `$relatedTo`): their schemas, the caller (whose ACLs and class permissions
/// apply to the inner class) and the connection the query runs on.
///
/// Thread-confined like the connection; marked `Sendable` only so the compiler stays a value
/// type that may be stored, never shared across threads.
public final class SubqueryContext: @unchecked Sendable {
    public let schemas: any QuerySchemaSource
    public let identity: Identity
    /// The SQLite connection (nil for PostgreSQL queries, which use `classSchema`).
    public let conn: Connection!
    /// PostgreSQL: the schema of a class (fields, indexes, class permissions), nil when the
    /// class does not exist.
    let classSchema: ((String) throws(ParseError) -> ClassSchema?)?

    public init(schemas: any QuerySchemaSource, identity: Identity, conn: Connection) {
        self.schemas = schemas
        self.identity = identity
        self.conn = conn
        self.classSchema = nil
    }

    /// For PostgreSQL queries: inner classes are looked up through `classSchema`.
    init(identity: Identity, classSchema: @escaping (String) throws(ParseError) -> ClassSchema?) {
        self.schemas = NoSchemas()
        self.identity = identity
        self.conn = nil
        self.classSchema = classSchema
    }

    /// The `QuerySchemaSource` of a context that looks classes up another way.
    struct NoSchemas: QuerySchemaSource {
        func querySchema(_ className: String, on conn: Connection) throws(ParseError) -> QuerySchema? { nil }
    }
}

extension QueryCompiler {
    /// `{"className": "Post", "where": {…}}` compiled as `SELECT <column> FROM "Post" t WHERE …`
    /// restricted to the rows the caller may find there (class permission `find`, pointer
    /// permissions, ACL). The inner table is aliased `t` as well, so the inner clauses (which name
    /// `data`, `rid` and `t.rperm`) bind to it, not to the outer row. Nil when the inner class does
    /// not exist (nothing matches). `column` is built from validated names.
    func innerQuery(_ spec: JSONValue, op: String, depth: Int, state: State,
                    column: (QuerySchema) throws(ParseError) -> String) throws(ParseError) -> Frag? {
        guard let ctx = subqueries else { throw ParseError(.invalidQuery, "\(op) is not available in this query") }
        guard depth < Self.maxDepth else { throw ParseError(.invalidQuery, "query nested deeper than \(Self.maxDepth) levels") }
        guard let o = spec.objectValue, let cls = o["className"]?.stringValue else {
            throw ParseError(.invalidQuery, "\(op) needs {\"className\": …, \"where\": {…}}")
        }
        guard Naming.isValidClassName(cls), !cls.hasPrefix(Naming.internalPrefix) else {
            throw ParseError(.invalidClassName, "invalid class name: \(cls)")
        }
        let whereValue = o["where"] ?? .object([:])
        guard whereValue.isNull || whereValue.objectValue != nil else { throw ParseError(.invalidQuery, "\(op) where must be a JSON object") }
        try ProtectedFields.check(cls, where: whereValue, identity: ctx.identity)
        if dialect == .postgres {
            return try pgInnerQuery(cls, whereValue, ctx: ctx, depth: depth, state: state, column: column)
        }
        try ctx.schemas.checkFind(cls, identity: ctx.identity)
        guard let inner = try ctx.schemas.querySchema(cls, on: ctx.conn) else { return nil }
        let sub = QueryCompiler(schema: inner, subqueries: ctx)
        let innerState = State()
        innerState.constraints = state.constraints
        var conds = [try sub.compileObject(whereValue.objectValue ?? [:], depth: depth + 1, state: innerState)]
        state.constraints = innerState.constraints
        if let acl = SelectBuilder.aclFilter(ctx.identity) { conds.append(acl) }
        if let r = ctx.schemas.readRestriction(cls, .find, identity: ctx.identity) { conds.append(Frag(r.sql, r.binds)) }
        let w = Self.and(conds)
        return Frag("SELECT \(try column(inner)) FROM \(Naming.table(cls)) t WHERE \(w.sql)", w.binds)
    }

    /// `$inQuery`: the Pointer field (or an array of Pointers) points to an object the inner
    /// query finds.
    func inQuery(_ field: FieldRef, _ raw: JSONValue, op: String, depth: Int, state: State) throws(ParseError) -> Frag {
        guard field.kind == .json else { throw ParseError(.invalidQuery, "\(op) needs a Pointer field, not \(field.path)") }
        switch field.declared {
        case .pointer?, .array?, nil: break
        default: throw ParseError(.invalidQuery, "\(op) needs a Pointer field; \(field.path) is a \(field.declared!.rawValue)")
        }
        guard let sub = try innerQuery(raw, op: op, depth: depth, state: state, column: { (_) throws(ParseError) in "t.objectId" }) else {
            return .alwaysFalse
        }
        let cls = raw["className"]?.stringValue ?? ""
        if dialect == .postgres { return pgInQuery(field, cls, sub) }
        if isArray(field) {
            return anyElement(field, Frag("CASE WHEN type='object' THEN json_extract(value,'$.className') = ? AND json_extract(value,'$.objectId') IN (\(sub.sql)) ELSE 0 END",
                                          [.text(cls)] + sub.binds))
        }
        return Frag("(json_extract(data,'$.\(field.path).className') = ? AND json_extract(data,'$.\(field.path).objectId') IN (\(sub.sql)))",
                    [.text(cls)] + sub.binds)
    }

    /// `$select`: the field's value is among the values of `key` in the objects the inner query
    /// finds (`{"query": {"className", "where"}, "key": "city"}`); compared in the canonical form of
    /// each side's type (a Pointer by objectId, a Date by instant).
    func select(_ field: FieldRef, _ raw: JSONValue, op: String, depth: Int, state: State) throws(ParseError) -> Frag {
        guard let o = raw.objectValue, let query = o["query"], let key = o["key"]?.stringValue else {
            throw ParseError(.invalidQuery, "\(op) needs {\"query\": {\"className\": …, \"where\": …}, \"key\": …}")
        }
        for e in o.entries where e.key != "query" && e.key != "key" { throw ParseError(.invalidQuery, "unknown \(op) option \(e.key)") }
        // A hidden field (`_User.email`) may not be selected either: matching against it would reveal it.
        if let ctx = subqueries, let cls = query["className"]?.stringValue {
            try ProtectedFields.check(cls, where: nil, field: key, identity: ctx.identity)
        }
        guard let sub = try innerQuery(query, op: op, depth: depth, state: state, column: { (inner) throws(ParseError) in
            let ref = try FieldRef(path: key, schema: inner)
            if dialect == .postgres { return Self.pgComparable(ref, inner: true) }
            return ref.kind == .json ? ref.expr(ref.declared) : "t.\(ref.path)"
        }) else { return .alwaysFalse }
        if dialect == .postgres {
            if isArray(field) { return anyElement(field, Frag("v IN (\(sub.sql))", sub.binds)) }
            return Frag("\(Self.pgComparable(field, inner: false)) IN (\(sub.sql))", sub.binds)
        }
        if isArray(field) {
            return anyElement(field, Frag("value IN (\(sub.sql))", sub.binds))
        }
        let left: String
        switch field.kind {
        case .objectId: left = "objectId"
        case .time: left = field.path
        case .json: left = field.expr(field.declared)
        }
        return Frag("\(left) IN (\(sub.sql))", sub.binds)
    }

    /// `{"$relatedTo": {"object": Pointer, "key": "likes"}}`: the objects in that object's Relation.
    func relatedTo(_ raw: JSONValue) throws(ParseError) -> Frag {
        guard let ctx = subqueries else { throw ParseError(.invalidQuery, "$relatedTo is not available in this query") }
        guard let o = raw.objectValue, let obj = o["object"], let key = o["key"]?.stringValue,
              obj.parseType == "Pointer" || obj.parseType == "Object",
              let owner = obj["className"]?.stringValue, let ownerId = obj["objectId"]?.stringValue else {
            throw ParseError(.invalidQuery, "$relatedTo needs {\"object\": Pointer, \"key\": field}")
        }
        guard Naming.isValidClassName(owner), !owner.hasPrefix(Naming.internalPrefix) else {
            throw ParseError(.invalidClassName, "invalid class name: \(owner)")
        }
        guard Naming.isValidFieldName(key) else { throw ParseError(.invalidKeyName, "invalid field name: \(key)") }
        let ownerSchema: QuerySchema?
        if let lookup = ctx.classSchema {
            ownerSchema = try lookup(owner)?.querySchema
        } else {
            ownerSchema = try ctx.schemas.querySchema(owner, on: ctx.conn)
        }
        guard let s = ownerSchema, let f = s.fields[key] else { return .alwaysFalse }
        guard f.type == .relation else { throw ParseError(.invalidQuery, "$relatedTo: \(owner).\(key) is not a Relation") }
        if dialect == .postgres {
            return Frag("objectId IN (SELECT relatedId FROM \(Naming.joinTable(owner, key)) WHERE owningId = \(Self.m)::text)", [.text(ownerId)])
        }
        return Frag("objectId IN (SELECT relatedId FROM \(Naming.joinTable(owner, key)) WHERE owningId = ?)", [.text(ownerId)])
    }
}
