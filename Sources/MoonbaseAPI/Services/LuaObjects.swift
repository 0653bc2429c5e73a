import MoonbaseJSON

/// Objects as Cloud Code sees them, and Lua values that stand for objects.
///
/// Objects handed to Lua (trigger `req.object`, `req.original`, `req.objects`, `db.*` results)
/// carry their `className` beside `objectId`, as Parse's objects do. Such a table used as a value
/// — in a where clause (`db.deleteWhere("Comment", {post = req.object})`) or as a field value
/// (`db.create("Comment", {post = post})`) — means a Pointer to it. `className` is never stored as
/// a field of the object itself.
enum LuaObjects {
    /// `o` with its `className`, for Lua.
    static func tagged(_ o: JSONObject, _ className: String) -> JSONObject {
        guard o["className"] == nil else { return o }
        var out = o
        out.entries.insert(.init("className", .string(className)), at: 0)
        return out
    }

    static func tagged(_ v: JSONValue, _ className: String) -> JSONValue {
        switch v {
        case .object(let o): return .object(tagged(o, className))
        case .array(let a): return .array(a.map { tagged($0, className) })
        default: return v
        }
    }

    /// `o` from Lua as stored: without the object's own `className`, object tables in its values
    /// turned into Pointers.
    static func untagged(_ o: JSONObject, _ className: String) -> JSONObject {
        var out = o
        if out["__type"] == nil, out["className"]?.stringValue == className { _ = out.removeValue(forKey: "className") }
        return pointers(in: out)
    }

    /// Each value of `o` (a where clause, fields or changes) with object tables — objects with a
    /// string `className` and `objectId` and no `__type` — replaced by Pointers, at any depth
    /// (`$in` lists, `$or` clauses, `Add` operations). The keys of `o` itself are left alone.
    static func pointers(in o: JSONObject) -> JSONObject {
        JSONObject(o.entries.map { .init($0.key, pointer($0.value)) })
    }

    static func pointers(_ v: JSONValue?) -> JSONValue? {
        guard let v, case .object(let o) = v else { return v }
        return .object(pointers(in: o))
    }

    static func pointer(_ v: JSONValue) -> JSONValue {
        switch v {
        case .object(let o):
            if o["__type"] == nil, let cls = o["className"]?.stringValue, let id = o["objectId"]?.stringValue {
                return ["__type": "Pointer", "className": .string(cls), "objectId": .string(id)]
            }
            return .object(pointers(in: o))
        case .array(let a):
            return .array(a.map(pointer))
        default:
            return v
        }
    }
}
