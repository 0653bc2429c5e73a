import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// Expands Pointers named by `include` paths into `{"__type":"Object","className",…fields}`.
///
/// Paths are dotted (`post.author`), at most 3 levels; a longer path implies its prefixes.
/// Pointers are fetched per class in batches with the reader's ACL filter, so a pointer the
/// reader may not see (or that dangles, or whose class the reader may not `get`: class-level
/// permissions, master-only system classes) stays a Pointer. `afterFind` runs on each included
/// class's objects. Arrays of pointers are expanded element by element.
///
/// The walk is backend-neutral: `fetchRows` reads the objects of one class by id for the reader
/// (SQLite's below; PostgreSQL's in `PostgresQuery.fetchByIds`).
struct IncludeExpander {
    /// The readable objects of `className` among `ids` (an empty list when the class may not be
    /// read at all).
    let fetchRows: (_ className: String, _ ids: [String]) throws(ParseError) -> [JSONObject]
    let afterFind: AfterFindHook?
    static let batch = 500

    init(afterFind: AfterFindHook?, fetchRows: @escaping (_ className: String, _ ids: [String]) throws(ParseError) -> [JSONObject]) {
        self.afterFind = afterFind
        self.fetchRows = fetchRows
    }

    /// Reads included objects from SQLite through `conn`.
    init(schemas: any QuerySchemaSource, identity: Identity, conn: Connection, afterFind: AfterFindHook?) {
        self.init(afterFind: afterFind) { (cls: String, ids: [String]) throws(ParseError) -> [JSONObject] in
            try Self.fetch(cls, ids, schemas: schemas, identity: identity, conn: conn)
        }
    }

    /// Include paths as a tree: `["post.author", "tags"]` → post{author{}}, tags{}.
    final class Node {
        var children: [(String, Node)] = []
        func child(_ name: String) -> Node {
            if let c = children.first(where: { $0.0 == name }) { return c.1 }
            let n = Node()
            children.append((name, n))
            return n
        }
    }

    mutating func expand(_ objects: inout [JSONObject], paths: [String]) throws(ParseError) {
        let root = Node()
        for p in paths {
            var n = root
            for part in p.split(separator: ".") { n = n.child(String(part)) }
        }
        try expand(&objects, node: root)
    }

    private mutating func expand(_ objects: inout [JSONObject], node: Node) throws(ParseError) {
        for (key, sub) in node.children {
            // Collect the pointers at `key`, grouped by class.
            var wanted: [String: [String]] = [:]
            for o in objects {
                for p in Self.pointers(in: o[key]) where wanted[p.0]?.contains(p.1) != true {
                    wanted[p.0, default: []].append(p.1)
                }
            }
            var found: [String: JSONObject] = [:]  // "Class\u{0}id" → expanded object
            for (cls, ids) in wanted.sorted(by: { $0.key < $1.key }) {
                var fetched = try fetchRows(cls, ids)
                if !sub.children.isEmpty { try expand(&fetched, node: sub) }
                if let afterFind { fetched = try afterFind(cls, fetched) }
                for o in fetched {
                    guard let id = o["objectId"]?.stringValue else { continue }
                    var full = JSONObject()
                    full["__type"] = "Object"
                    full["className"] = .string(cls)
                    full.entries.append(contentsOf: o.entries)
                    found[cls + "\u{0}" + id] = full
                }
            }
            for i in objects.indices {
                guard let v = objects[i][key] else { continue }
                objects[i][key] = Self.replace(v, found)
            }
        }
    }

    private static func pointer(_ v: JSONValue) -> (String, String)? {
        guard v.parseType == "Pointer", let c = v["className"]?.stringValue, let id = v["objectId"]?.stringValue else { return nil }
        return (c, id)
    }

    static func pointers(in v: JSONValue?) -> [(String, String)] {
        guard let v else { return [] }
        if let p = pointer(v) { return [p] }
        if let a = v.arrayValue { return a.compactMap(pointer) }
        return []
    }

    static func replace(_ v: JSONValue, _ found: [String: JSONObject]) -> JSONValue {
        if let (c, id) = pointer(v) { return found[c + "\u{0}" + id].map { .object($0) } ?? v }
        if let a = v.arrayValue { return .array(a.map { replace($0, found) }) }
        return v
    }

    private static func fetch(_ className: String, _ ids: [String], schemas: any QuerySchemaSource, identity: Identity,
                              conn: Connection) throws(ParseError) -> [JSONObject] {
        guard Naming.isValidClassName(className), schemas.allowsGet(className, identity: identity),
              let schema = try schemas.querySchema(className, on: conn) else { return [] }
        var out: [JSONObject] = []
        var start = 0
        while start < ids.count {
            let chunk = Array(ids[start..<min(ids.count, start + Self.batch)])
            start += Self.batch
            var sql = "SELECT \(SelectBuilder.columns) FROM \(Naming.table(schema.className)) t WHERE t.objectId IN ("
                + Array(repeating: "?", count: chunk.count).joined(separator: ",") + ")"
            var binds: [SQLiteValue] = chunk.map { .text($0) }
            if let acl = QueryExecutor(schemas: schemas).readFilter(className, .get, identity) {
                sql += " AND " + acl.sql
                binds += acl.binds
            }
            try conn.query(sql, binds) { (s) throws(ParseError) in
                out.append(try RowSerializer.object(s, className: className, identity: identity))
            }
        }
        return out
    }
}

/// A `keys` projection as a tree of paths; the reserved fields are always kept.
public struct KeyTree {
    final class Node {
        var children: [String: Node] = [:]
        /// The whole value is kept (the path ended here).
        var whole = false
    }
    let root = Node()
    static let always: Set<String> = ["objectId", "createdAt", "updatedAt", "ACL", "__type", "className"]

    public init(_ paths: [String]) {
        for p in paths {
            var n = root
            for part in p.split(separator: ".") {
                let k = String(part)
                if n.children[k] == nil { n.children[k] = Node() }
                n = n.children[k]!
            }
            n.whole = true
        }
    }

    public func project(_ o: JSONObject) -> JSONObject { Self.project(o, root) }

    private static func project(_ o: JSONObject, _ node: Node) -> JSONObject {
        var out = JSONObject()
        for e in o.entries {
            if always.contains(e.key) { out.entries.append(e); continue }
            guard let child = node.children[e.key] else { continue }
            if child.whole || child.children.isEmpty {
                out.entries.append(e)
            } else if case .object(let inner) = e.value, inner["__type"] == nil || inner["__type"] == "Object" {
                out.entries.append(JSONObject.Entry(e.key, .object(project(inner, child))))
            } else {
                out.entries.append(e)
            }
        }
        return out
    }
}
