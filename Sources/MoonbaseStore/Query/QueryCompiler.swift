import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// Compiles Parse's `where` (a JSON object) into a SQL boolean expression with bound parameters.
///
/// The class table is aliased `t`. Field expressions come from `Naming.fieldExpr`, so expression
/// indexes declared on the same fields apply. Supported: equality (typed: Date, Pointer, File,
/// GeoPoint; array containment), `$lt $lte $gt $gte $ne $in $nin $exists $all $regex $options`,
/// `$or $and $nor`, `$eq`, `$containedBy`, `$text`, `$nearSphere` (+ `$maxDistance*`),
/// `$within {$box}`, `$geoWithin {$centerSphere|$box|$polygon}`, `$geoIntersects {$point}`, and,
/// given a `SubqueryContext`, `$inQuery $notInQuery $select $dontSelect $relatedTo` (inner
/// queries carry the caller's ACL and class permissions). Errors: unknown operator or malformed operand → 102,
/// invalid field name → 105, value of the wrong type for the field → 111.
///
/// ```swift
/// let c = try QueryCompiler(schema: schema).compile(["likes": ["$gte": 10]])
/// // c.sql == "json_extract(data,'$.likes') >= ?", c.binds == [.integer(10)]
/// ```
public struct QueryCompiler: Sendable {
    public let schema: QuerySchema
    /// Other classes and the caller, for inner queries; nil refuses them (102).
    public let subqueries: SubqueryContext?
    /// The SQL spelling: SQLite's (the default) or PostgreSQL's. Validation, limits and error
    /// codes are the same for both; only the emitted text and binds differ.
    public let dialect: SQLDialect
    /// Nesting bound for `$or`/`$and`, and a bound on the total number of constraints.
    public static let maxDepth = 8
    public static let maxConstraints = 512
    /// Elements of one `$in`/`$nin`/`$all` list.
    public static let maxListLength = 1000
    /// `$regex` patterns, in bytes.
    public static let maxRegexBytes = 256

    public init(schema: QuerySchema, subqueries: SubqueryContext? = nil, dialect: SQLDialect = .sqlite) {
        self.schema = schema
        self.subqueries = subqueries
        self.dialect = dialect
    }

    /// A SQL fragment with its binds.
    struct Frag {
        var sql: String
        var binds: [SQLiteValue]
        init(_ sql: String, _ binds: [SQLiteValue] = []) { self.sql = sql; self.binds = binds }
        static let alwaysTrue = Frag("1")
        static let alwaysFalse = Frag("0")
    }

    /// Mutable state of one compilation (constraint count, the top-level geo/text filters).
    final class State {
        var constraints = 0
        var geo: GeoFilter?
        var nearCount = 0
        var text: TextFilter?
        /// The other constraints of the field entry that holds the top-level geo filter.
        var geoResidual: Frag?
    }

    /// Compiles `where`; `nil`, `null` and `{}` match every row.
    public func compile(_ whereValue: JSONValue?) throws(ParseError) -> CompiledWhere {
        guard let whereValue, !whereValue.isNull else { return .all }
        guard let obj = whereValue.objectValue else {
            throw ParseError(.invalidQuery, "where must be a JSON object")
        }
        let state = State()
        var parts: [Frag] = []
        var geoIndex: Int?
        for entry in obj.entries {
            let hadGeo = state.geo != nil
            let f = try compileEntry(entry.key, entry.value, depth: 0, state: state)
            if !hadGeo, state.geo != nil { geoIndex = parts.count }
            parts.append(f)
        }
        let all = conjoin(parts)
        guard let gi = geoIndex, let geo = state.geo else {
            if dialect == .postgres { return CompiledWhere(sql: Self.pgFinal(all).sql, binds: all.binds, text: state.text) }
            return CompiledWhere(sql: all.sql, binds: all.binds, text: state.text)
        }
        var rest = parts
        rest[gi] = state.geoResidual ?? .alwaysTrue
        if dialect == .postgres {
            let residual = Self.pgFinal(Self.pgAnd(rest))
            return CompiledWhere(sql: Self.pgFinal(all).sql, binds: all.binds, geo: geo, text: state.text,
                                 residualSQL: residual.sql, residualBinds: residual.binds)
        }
        let residual = Self.and(rest)
        return CompiledWhere(sql: all.sql, binds: all.binds, geo: geo, text: state.text,
                             residualSQL: residual.sql, residualBinds: residual.binds)
    }

    static func and(_ parts: [Frag]) -> Frag {
        let kept = parts.filter { $0.sql != "1" }
        if kept.isEmpty { return .alwaysTrue }
        if kept.count == 1 { return kept[0] }
        return Frag(kept.map(\.sql).joined(separator: " AND "), kept.flatMap(\.binds))
    }

    static func or(_ parts: [Frag]) -> Frag {
        if parts.contains(where: { $0.sql == "1" }) { return .alwaysTrue }
        let kept = parts.filter { $0.sql != "0" }
        if kept.isEmpty { return .alwaysFalse }
        if kept.count == 1 { return kept[0] }
        return Frag("(" + kept.map { "(\($0.sql))" }.joined(separator: " OR ") + ")", kept.flatMap(\.binds))
    }

    static func not(_ f: Frag) -> Frag {
        if f.sql == "1" { return .alwaysFalse }
        if f.sql == "0" { return .alwaysTrue }
        // A NULL (missing field) makes the positive test NULL; its negation must then match.
        return Frag("coalesce(\(f.sql),0)=0", f.binds)
    }

    /// `and`, `or` and `not` in this compiler's dialect.
    @inline(__always) func conjoin(_ parts: [Frag]) -> Frag { dialect == .sqlite ? Self.and(parts) : Self.pgAnd(parts) }
    @inline(__always) func disjoin(_ parts: [Frag]) -> Frag { dialect == .sqlite ? Self.or(parts) : Self.pgOr(parts) }
    @inline(__always) func negate(_ f: Frag) -> Frag { dialect == .sqlite ? Self.not(f) : Self.pgNot(f) }

    func compileObject(_ obj: JSONObject, depth: Int, state: State) throws(ParseError) -> Frag {
        var parts: [Frag] = []
        for entry in obj.entries {
            parts.append(try compileEntry(entry.key, entry.value, depth: depth, state: state))
        }
        return conjoin(parts)
    }

    func compileEntry(_ key: String, _ value: JSONValue, depth: Int, state: State) throws(ParseError) -> Frag {
        state.constraints += 1
        guard state.constraints <= Self.maxConstraints else {
            throw ParseError(.invalidQuery, "query too complex: more than \(Self.maxConstraints) constraints")
        }
        switch key {
        case "$relatedTo":
            return try relatedTo(value)
        case "$or", "$and", "$nor":
            guard depth < Self.maxDepth else {
                throw ParseError(.invalidQuery, "query nested deeper than \(Self.maxDepth) levels")
            }
            guard let list = value.arrayValue, !list.isEmpty else {
                throw ParseError(.invalidQuery, "\(key) needs a non-empty array of queries")
            }
            var parts: [Frag] = []
            for sub in list {
                guard let o = sub.objectValue else {
                    throw ParseError(.invalidQuery, "\(key) needs an array of query objects")
                }
                let f = try compileObject(o, depth: depth + 1, state: state)
                parts.append(f)
            }
            switch key {
            case "$or": return disjoin(parts)
            case "$nor": return negate(disjoin(parts))
            default: return conjoin(parts)
            }
        default:
            break
        }
        if key.hasPrefix("$") { throw ParseError(.invalidQuery, "unknown operator \(key)") }
        let field = try FieldRef(path: key, schema: schema)
        if let ops = value.objectValue, let first = ops.entries.first, first.key.hasPrefix("$") {
            return try compileOperators(field, ops, depth: depth, state: state)
        }
        return try equality(field, value)
    }
}

/// A field named in a query, validated and resolved against the class schema.
struct FieldRef {
    enum Kind { case objectId, time, json }
    let path: String
    let kind: Kind
    /// Declared type (top-level fields only; nested paths and unknown fields are nil).
    let declared: FieldType?

    init(path: String, schema: QuerySchema) throws(ParseError) {
        switch path {
        case "objectId": self.path = path; kind = .objectId; declared = .string; return
        case "createdAt", "updatedAt": self.path = path; kind = .time; declared = .date; return
        default: break
        }
        guard Naming.isValidFieldPath(path) else {
            throw ParseError(.invalidKeyName, "invalid field name: \(path)")
        }
        if path == "ACL" { throw ParseError(.invalidQuery, "cannot query on ACL") }
        self.path = path
        kind = .json
        declared = path.contains(".") ? nil : schema.fields[path]?.type
    }

    /// The canonical SQL expression for this field read as `type`.
    func expr(_ type: FieldType?) -> String { Naming.fieldExpr(path, type: type) }

    /// JSON path literal (`'$.a.b'`) of the field; names are validated, so splicing is safe.
    var jsonPath: String { "'$.\(path)'" }
}
