import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Synchronization

/// Finds whose `where` is only `field = scalar` equalities (Lua's `db.first("Post", {slug = s})`
/// in a loop, the commonest read of Cloud Code), answered without compiling the query each time.
///
/// The first such query of a shape (class, field names, each field's declared type, each value's
/// JSON kind, the caller's ACL condition) is compiled by `QueryCompiler` and `SelectBuilder`, as
/// the general find compiles it; the statement text is kept, keyed by that shape. Later queries of
/// the shape bind their values straight into it. A shape is kept only when the binds derived from
/// the values are exactly the compiler's (checked on the first query), so the cache can never
/// answer differently from the general path. Schema changes cannot leave a stale entry behind: a
/// field's declared type is part of the key, the class and its permissions are read on every
/// call, and a removed class answers through the general path.
///
/// Not handled here (nil: the caller runs the general find): other operators, null, objects or
/// arrays as values, `createdAt`/`updatedAt` (their values are parsed), Date, Pointer, File, Array
/// and geo fields, classes whose rows are not spliced as stored (`_User` and the other system
/// classes), callers limited by pointer permissions or refused by the class permissions.
final class EqualityFinds: Sendable {
    /// A cached statement, or a shape the general path must answer.
    enum Plan: Sendable {
        case sql(String)
        case general
    }

    private let plans = Mutex<[String: Plan]>([:])
    /// Shapes kept at most (cleared when full: shapes come from code, not from data).
    static let maxPlans = 512

    /// The answer of `find(q)` for `where = equal`, `limit`, no other option, or nil when this
    /// path does not apply. `schema` is the class's schema as the calling thread sees it; the
    /// caller has checked that class permissions allow `identity` every object (`.allowed`).
    func find(_ schema: ClassSchema, _ equal: JSONObject, limit: Int, identity: Identity,
              on conn: Connection) throws(ParseError) -> FindResult? {
        guard limit > 0, RowSerializer.canSplice(schema.className) else { return nil }
        var key = schema.className
        var binds: [SQLiteValue] = []
        binds.reserveCapacity(equal.count + 2)
        for e in equal.entries {
            guard let (typeCode, bind) = Self.scalar(e.key, e.value, schema) else { return nil }
            key.append("\u{1}")
            key.append(e.key)
            key.append(typeCode)
            binds.append(bind)
        }
        let acl = SelectBuilder.aclFilter(identity)
        key.append("\u{2}")
        if let acl {
            key.append(acl.sql)
            binds.append(contentsOf: acl.binds)
        }
        binds.append(.integer(Int64(limit)))
        binds.append(.integer(0))
        let sql: String
        switch plans.withLock({ $0[key] }) {
        case .sql(let s)?: sql = s
        case .general?: return nil
        case nil:
            guard let s = try Self.compile(schema, equal, limit: limit, acl: acl, expecting: binds) else {
                remember(key, .general)
                return nil
            }
            remember(key, .sql(s))
            sql = s
        }
        var w = JSONWriter(capacity: 1024)
        var n = 0
        w.byte(UInt8(ascii: "["))
        try conn.query(sql, binds) { (s) throws(ParseError) in
            if n > 0 { w.byte(UInt8(ascii: ",")) }
            RowSerializer.writeSpliced(s, into: &w)
            n += 1
        }
        w.byte(UInt8(ascii: "]"))
        return FindResult(results: w.bytes, resultCount: n, count: nil)
    }

    private func remember(_ key: String, _ plan: Plan) {
        plans.withLock { all in
            if all.count >= Self.maxPlans { all.removeAll(keepingCapacity: true) }
            all[key] = plan
        }
    }

    /// The key code and the bind of `field = value` for the scalars this path takes, mirroring
    /// `QueryCompiler.operand` for them (the first query of a shape checks the mirror).
    static func scalar(_ field: String, _ value: JSONValue, _ schema: ClassSchema) -> (String, SQLiteValue)? {
        if field.utf8.first == UInt8(ascii: "$") { return nil }
        let type: String
        switch field {
        case "objectId": type = "i"
        case "createdAt", "updatedAt", "ACL": return nil
        default:
            switch schema.fields[field]?.type {
            case nil: type = field.utf8.contains(UInt8(ascii: ".")) ? "p" : "u"
            case .string?: type = "s"
            case .number?: type = "n"
            case .boolean?: type = "b"
            case .object?: type = "o"
            default: return nil
            }
        }
        switch value {
        case .string(let s): return (type + "S", .text(s))
        case .int(let i): return (type + "I", .integer(i))
        case .double(let d): return (type + "D", .real(d))
        case .bool(let b): return (type + "B", .integer(b ? 1 : 0))
        default: return nil
        }
    }

    /// The statement the general find builds for this query, or nil when it is not a plain
    /// select whose binds are `expecting` (then the shape stays with the general path).
    static func compile(_ schema: ClassSchema, _ equal: JSONObject, limit: Int, acl: QueryCompiler.Frag?,
                        expecting binds: [SQLiteValue]) throws(ParseError) -> String? {
        let qs = QuerySchema(className: schema.className, fields: schema.fields, textIndexes: schema.textIndexes)
        let compiled: CompiledWhere
        do throws(ParseError) {
            compiled = try QueryCompiler(schema: qs).compile(equal.isEmpty ? nil : .object(equal))
        } catch {
            return nil   // the general path reports it
        }
        guard compiled.geo == nil, compiled.text == nil else { return nil }
        let stmt = try SelectBuilder(schema: qs, compiled: compiled, acl: acl).select(plan: .generic, order: [], limit: limit, skip: 0)
        return stmt.binds == binds ? stmt.sql : nil
    }
}
