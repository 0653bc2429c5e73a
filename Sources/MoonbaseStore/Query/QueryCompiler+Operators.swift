import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

extension QueryCompiler {
    static let comparisons: [String: String] = ["$lt": "<", "$lte": "<=", "$gt": ">", "$gte": ">="]
    static let geoModifiers: Set<String> = [
        "$maxDistance", "$maxDistanceInRadians", "$maxDistanceInMiles", "$maxDistanceInKilometers",
    ]

    /// `{"$op": operand, …}` on one field: each operator is one more AND-ed condition.
    func compileOperators(_ field: FieldRef, _ ops: JSONObject, depth: Int, state: State) throws(ParseError) -> Frag {
        var parts: [Frag] = []
        var geoPart: Int?
        for entry in ops.entries {
            let op = entry.key, v = entry.value
            if let sqlOp = Self.comparisons[op] {
                parts.append(try comparison(field, sqlOp, v, op: op))
                continue
            }
            switch op {
            case "$eq": parts.append(try equality(field, v))
            case "$ne": parts.append(negate(try equality(field, v)))
            case "$in": parts.append(try inList(field, v, op: op))
            case "$nin": parts.append(negate(try inList(field, v, op: op)))
            case "$all": parts.append(try all(field, v))
            case "$exists": parts.append(try exists(field, v))
            case "$regex": parts.append(try regex(field, v, options: ops["$options"]))
            case "$options":
                guard ops["$regex"] != nil else { throw ParseError(.invalidQuery, "$options needs $regex") }
            case "$text": parts.append(try text(field, v, state: state))
            case "$containedBy": parts.append(try containedBy(field, v))
            case "$inQuery": parts.append(try inQuery(field, v, op: op, depth: depth, state: state))
            case "$notInQuery": parts.append(negate(try inQuery(field, v, op: op, depth: depth, state: state)))
            case "$select": parts.append(try select(field, v, op: op, depth: depth, state: state))
            case "$dontSelect": parts.append(negate(try select(field, v, op: op, depth: depth, state: state)))
            case "$geoIntersects": parts.append(try geoIntersects(field, v))
            case "$nearSphere", "$within", "$geoWithin":
                let hadGeo = state.geo != nil
                parts.append(try geo(field, op, v, ops: ops, depth: depth, state: state))
                if !hadGeo, state.geo != nil { geoPart = parts.count - 1 }
            default:
                if Self.geoModifiers.contains(op) {
                    guard ops["$nearSphere"] != nil else { throw ParseError(.invalidQuery, "\(op) needs $nearSphere") }
                } else {
                    throw ParseError(.invalidQuery, "unknown operator \(op)")
                }
            }
        }
        if let gp = geoPart {
            var rest = parts
            rest.remove(at: gp)
            state.geoResidual = conjoin(rest)
        }
        return conjoin(parts)
    }

    func comparison(_ field: FieldRef, _ sqlOp: String, _ raw: JSONValue, op: String) throws(ParseError) -> Frag {
        let value = try QueryValue(raw)
        switch value {
        case .number, .string, .date: break
        case .pointer where field.kind == .objectId: break
        default: throw ParseError(.invalidQuery, "\(op) needs a number, string or Date, not a \(value.typeName)")
        }
        if isArray(field) { return anyElement(field, try elementCondition(value, op: sqlOp)) }
        let (expr, bind) = try operand(field, value)
        if dialect == .postgres { return try pgCompare(field, value, op: sqlOp) }
        return Frag("\(expr) \(sqlOp) ?", [bind])
    }

    func list(_ raw: JSONValue, op: String) throws(ParseError) -> [JSONValue] {
        guard let list = raw.arrayValue else { throw ParseError(.invalidQuery, "\(op) needs an array") }
        guard list.count <= Self.maxListLength else {
            throw ParseError(.invalidQuery, "\(op) accepts at most \(Self.maxListLength) values")
        }
        return list
    }

    /// `$in`: the field equals one of the values (an array field: contains one of them).
    func inList(_ field: FieldRef, _ raw: JSONValue, op: String) throws(ParseError) -> Frag {
        let values = try list(raw, op: op)
        if values.isEmpty { return .alwaysFalse }
        if isArray(field) {
            var conds: [Frag] = []
            for v in values { conds.append(try elementCondition(try QueryValue(v), op: "=")) }
            let any = disjoin(conds)
            return anyElement(field, any)
        }
        if dialect == .postgres {
            var parts: [Frag] = []
            for v in values { parts.append(try equality(field, v)) }
            return disjoin(parts)
        }
        // Group values by the expression they compare with (a Pointer and a string differ).
        var groups: [(expr: String, binds: [SQLiteValue])] = []
        var extra: [Frag] = []
        for v in values {
            let q = try QueryValue(v)
            switch q {
            case .null, .json, .geoPoint:
                extra.append(try equality(field, v))
            default:
                let (expr, bind) = try operand(field, q)
                if let i = groups.firstIndex(where: { $0.expr == expr }) {
                    groups[i].binds.append(bind)
                } else {
                    groups.append((expr, [bind]))
                }
            }
        }
        var parts: [Frag] = groups.map { g in
            g.binds.count == 1
                ? Frag("\(g.expr) = ?", g.binds)
                : Frag("\(g.expr) IN (" + Array(repeating: "?", count: g.binds.count).joined(separator: ",") + ")", g.binds)
        }
        parts.append(contentsOf: extra)
        return disjoin(parts)
    }

    /// `$all`: an array field contains every value.
    func all(_ field: FieldRef, _ raw: JSONValue) throws(ParseError) -> Frag {
        let values = try list(raw, op: "$all")
        if values.isEmpty { return .alwaysFalse }
        var parts: [Frag] = []
        for v in values {
            if isArray(field) {
                parts.append(anyElement(field, try elementCondition(try QueryValue(v), op: "=")))
            } else {
                parts.append(try equality(field, v))
            }
        }
        return conjoin(parts)
    }

    /// `$containedBy`: an array field whose every element is one of the values (an empty array
    /// qualifies; a missing or non-array field does not).
    func containedBy(_ field: FieldRef, _ raw: JSONValue) throws(ParseError) -> Frag {
        let values = try list(raw, op: "$containedBy")
        guard field.kind == .json else { throw ParseError(.invalidQuery, "$containedBy needs an array field") }
        if let d = field.declared, d != .array { throw ParseError(.invalidQuery, "$containedBy needs an array field; \(field.path) is a \(d.rawValue)") }
        var conds: [Frag] = []
        for v in values { conds.append(try elementCondition(try QueryValue(v), op: "=")) }
        let any = disjoin(conds)
        if dialect == .postgres { return pgContainedBy(field, any) }
        return Frag("(json_type(data,\(field.jsonPath)) = 'array' AND NOT EXISTS(SELECT 1 FROM json_each(data,\(field.jsonPath)) WHERE coalesce(\(any.sql),0) = 0))",
                    any.binds)
    }

    func exists(_ field: FieldRef, _ raw: JSONValue) throws(ParseError) -> Frag {
        guard let want = raw.boolValue else { throw ParseError(.invalidQuery, "$exists needs true or false") }
        if field.kind != .json { return want ? .alwaysTrue : .alwaysFalse }
        if dialect == .postgres { return Frag("\(Self.pgJSON(field.path)) IS \(want ? "NOT " : "")NULL") }
        return Frag("json_type(data,\(field.jsonPath)) IS \(want ? "NOT " : "")NULL")
    }
}
