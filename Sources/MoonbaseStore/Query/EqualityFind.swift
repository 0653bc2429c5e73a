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
        /// The statement, and its number for `Connection.query(plan:)`.
        case sql(String, Int)
        case general
    }
    private let planNumbers = Atomic<Int>(0)

    /// One shape of a class: its field names in order, each field's code (declared type and
    /// value kind, a byte each, packed), the caller's ACL condition.
    struct Shape: Sendable {
        let fields: [String]
        let codes: UInt64
        let acl: String
        let plan: Plan
    }

    /// Shapes by class name (no key text is built per query: a class holds a few shapes, scanned);
    /// read by every query from every thread, so without a shared lock.
    private let shapes = ThreadSnapshot<[String: [Shape]]>([:])
    /// Shapes kept at most per class, and classes (cleared when full: shapes come from code).
    static let maxShapesPerClass = 64
    static let maxClasses = 512
    /// Fields of a where this path takes at most (their codes are packed in 64 bits).
    static let maxFields = 8

    /// The answer of `find(q)` for `where = equal`, `limit`, no other option, or nil when this
    /// path does not apply. `schema` is the class's schema as the calling thread sees it; the
    /// caller has checked that class permissions allow `identity` every object (`.allowed`).
    func find(_ schema: ClassSchema, _ equal: JSONObject, limit: Int, identity: Identity,
              on conn: Connection) throws(ParseError) -> FindResult? {
        guard limit > 0, equal.count <= Self.maxFields, RowSerializer.canSplice(schema.className) else { return nil }
        var codes: UInt64 = 0
        var binds: [SQLiteValue] = []
        binds.reserveCapacity(equal.count + 2)
        for e in equal.entries {
            guard let (code, bind) = Self.scalar(e.key, e.value, schema) else { return nil }
            codes = codes << 8 | UInt64(code)
            binds.append(bind)
        }
        let acl = SelectBuilder.aclFilter(identity)
        let aclSQL = acl?.sql ?? ""
        if let acl { binds.append(contentsOf: acl.binds) }
        binds.append(.integer(Int64(limit)))
        binds.append(.integer(0))
        let known = shapes.read { all -> Plan? in
            guard let list = all[schema.className] else { return nil }
            for shape in list where shape.codes == codes && shape.acl == aclSQL && shape.fields.count == equal.count {
                var same = true
                for (i, e) in equal.entries.enumerated() where shape.fields[i] != e.key { same = false; break }
                if same { return shape.plan }
            }
            return nil
        }
        let sql: String
        let number: Int
        switch known {
        case .sql(let s, let k)?: (sql, number) = (s, k)
        case .general?: return nil
        case nil:
            let s = try Self.compile(schema, equal, limit: limit, acl: acl, expecting: binds)
            let k = planNumbers.add(1, ordering: .relaxed).newValue
            remember(schema.className, Shape(fields: equal.entries.map(\.key), codes: codes, acl: aclSQL, plan: s.map { .sql($0, k) } ?? .general))
            guard let s else { return nil }
            (sql, number) = (s, k)
        }
        // A `db.first` row fits in 512 bytes mostly; a buffer over ~1,000 bytes misses glibc's
        // per-thread cache of small chunks (a `malloc` several times dearer).
        var w = JSONWriter(capacity: limit == 1 ? 512 : 2048)
        var n = 0
        w.byte(UInt8(ascii: "["))
        try conn.query(plan: number, sql, binds) { (s) throws(ParseError) in
            if n > 0 { w.byte(UInt8(ascii: ",")) }
            RowSerializer.writeSpliced(s, into: &w)
            n += 1
        }
        w.byte(UInt8(ascii: "]"))
        return FindResult(results: w.bytes, resultCount: n, count: nil)
    }

    private func remember(_ className: String, _ shape: Shape) {
        shapes.update { all in
            if all[className] == nil && all.count >= Self.maxClasses { all.removeAll(keepingCapacity: true) }
            var list = all[className] ?? []
            if list.count >= Self.maxShapesPerClass { list.removeAll() }
            list.append(shape)
            all[className] = list
        }
    }

    /// The code and the bind of `field = value` for the scalars this path takes, mirroring
    /// `QueryCompiler.operand` for them (the first query of a shape checks the mirror). The code
    /// is the field's declared type (high nibble) and the value's JSON kind (low nibble).
    static func scalar(_ field: String, _ value: JSONValue, _ schema: ClassSchema) -> (UInt8, SQLiteValue)? {
        if field.utf8.first == UInt8(ascii: "$") { return nil }
        let type: UInt8
        switch field {
        case "objectId": type = 1
        case "createdAt", "updatedAt", "ACL": return nil
        default:
            switch schema.fields[field]?.type {
            case nil: type = field.utf8.contains(UInt8(ascii: ".")) ? 2 : 3
            case .string?: type = 4
            case .number?: type = 5
            case .boolean?: type = 6
            case .object?: type = 7
            default: return nil
            }
        }
        switch value {
        case .string(let s): return (type << 4 | 1, .text(s))
        case .int(let i): return (type << 4 | 2, .integer(i))
        case .double(let d): return (type << 4 | 3, .real(d))
        case .bool(let b): return (type << 4 | 4, .integer(b ? 1 : 0))
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
