import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// One field's change in an update (a plain set or a Parse `__op`), and how it becomes SQL.
enum FieldChange {
    case set(String, JSONValue)
    case delete(String)
    case increment(String, JSONValue)
    /// `Add`, `AddUnique` or `Remove` with the canonicalised items.
    case array(String, ArrayOp, [JSONValue])
    /// `AddRelation` / `RemoveRelation`: the field holds the Relation marker, members go to the
    /// join table (`RelationChange.apply`).
    case relation(RelationChange)

    enum ArrayOp: String { case add = "Add", addUnique = "AddUnique", remove = "Remove" }

    var field: String {
        switch self {
        case .set(let f, _), .delete(let f), .increment(let f, _), .array(let f, _, _): return f
        case .relation(let r): return r.field
        }
    }

    /// Parses one entry of an update body.
    /// - Returns: the change and the type it gives the field (nil for deletes and nulls).
    static func parse(_ name: String, _ value: JSONValue, nested: Bool = false) throws(ParseError) -> (FieldChange, FieldInfo?) {
        guard case .object(let o) = value, let opValue = o["__op"] else {
            if nested { return (.set(name, try TypedValues.nested(value, field: name)), nil) }
            let (v, info) = try TypedValues.canonical(value, field: name)
            return (.set(name, v), info)
        }
        switch opValue.stringValue {
        case "Delete"?:
            return (.delete(name), nil)
        case "Increment"?:
            guard let amount = o["amount"], amount.isNumber else {
                throw ParseError(.incorrectType, "Increment of \(name) needs a numeric amount")
            }
            return (.increment(name, amount), FieldInfo(type: .number))
        case let op? where op == "AddRelation" || op == "RemoveRelation" || op == "Batch":
            guard !nested else { throw ParseError(.invalidKeyName, "\(op) needs a top-level field, not \(name)") }
            let r = try RelationChange.parse(name, op: op, o)
            return (.relation(r), FieldInfo(type: .relation, targetClass: r.targetClass))
        case let op? where FieldChange.ArrayOp(rawValue: op) != nil:
            guard let items = o["objects"]?.arrayValue else {
                throw ParseError(.incorrectType, "\(op) of \(name) needs an objects array")
            }
            let canon = try items.map { (x) throws(ParseError) in try TypedValues.nested(x, field: name) }
            return (.array(name, FieldChange.ArrayOp(rawValue: op)!, canon), FieldInfo(type: .array))
        default:
            throw ParseError(.incorrectType, "unsupported __op for \(name): \(opValue.stringValue ?? "?")")
        }
    }

    /// The value an op gives a field on create (`Increment` → amount, `Add*` → items,
    /// `Remove` → [], `Delete` → absent).
    var createValue: JSONValue? {
        switch self {
        case .set(_, let v): return v
        case .relation(let r): return RelationChange.marker(r.targetClass)
        case .delete: return nil
        case .increment(_, let v): return v
        case .array(_, let op, let items):
            if op == .remove { return .array([]) }
            if op == .addUnique {
                var out: [JSONValue] = []
                for i in items where !out.contains(i) { out.append(i) }
                return .array(out)
            }
            return .array(items)
        }
    }

    /// Builds `data`'s new value as one SQL expression over the row's current `data`: plain sets
    /// and increments in one `json_set`, array operators through `mb_array_op` (atomic: it all
    /// runs inside the single UPDATE), deletes in a `json_remove`. Paths are validated names.
    static func dataExpression(_ changes: [FieldChange], binds: inout [SQLiteValue]) -> String {
        var pairs: [String] = []
        var removes: [String] = []
        // Nested keys (`a.b.c`): json_set only creates the last path element, so an inner
        // json_set first makes sure every parent exists as an object (keeping its members).
        var parents: [String] = []
        for c in changes where c.field.contains(".") {
            if case .delete = c { continue }
            let parts = c.field.split(separator: ".")
            for k in 1..<parts.count {
                let p = parts[0..<k].joined(separator: ".")
                if !parents.contains(p) { parents.append(p) }
            }
        }
        var parentPairs: [String] = []
        for p in parents {
            parentPairs.append("'$.\(p)', json(coalesce(json_extract(data, '$.\(p)'), '{}'))")
        }
        for c in changes {
            let path = "'$.\(c.field)'"
            switch c {
            case .set(_, let v):
                switch v {
                case .string(let s): pairs.append("\(path), ?"); binds.append(.text(s))
                case .int(let i): pairs.append("\(path), ?"); binds.append(.integer(i))
                case .double(let d): pairs.append("\(path), ?"); binds.append(.real(d))
                default: pairs.append("\(path), json(?)"); binds.append(.text(v.jsonString))
                }
            case .increment(_, let v):
                pairs.append("\(path), coalesce(json_extract(data, \(path)), 0) + ?")
                binds.append(v.intValue.map { SQLiteValue.integer($0) } ?? .real(v.doubleValue ?? 0))
            case .array(_, let op, let items):
                pairs.append("\(path), json(mb_array_op(json_extract(data, \(path)), ?, '\(op.rawValue)'))")
                binds.append(.text(JSONValue.array(items).jsonString))
            case .relation(let r):
                pairs.append("\(path), json(?)")
                binds.append(.text(RelationChange.marker(r.targetClass).jsonString))
            case .delete:
                removes.append(path)
            }
        }
        var expr = "data"
        // A separate inner json_set: SQLite (3.40) does not descend into a node replaced earlier
        // in the same json_set call.
        if !parentPairs.isEmpty { expr = "json_set(data, \(parentPairs.joined(separator: ", ")))" }
        if !pairs.isEmpty { expr = "json_set(\(expr), \(pairs.joined(separator: ", ")))" }
        if !removes.isEmpty { expr = "json_remove(\(expr), \(removes.joined(separator: ", ")))" }
        return expr
    }
}

/// `mb_array_op(current, items, op)`: the array `current` (JSON text or NULL) after Parse's
/// `Add` (append all), `AddUnique` (append those not present) or `Remove` (drop every equal
/// element). A non-array current value → 111.
let arrayOpFunction = SQLFunction(name: "mb_array_op", argumentCount: 3) { (args) throws(ParseError) -> SQLiteValue in
    var current: JSONValue?
    if case .text(let t) = args[0] {
        current = try JSON.parse(t)
        if current?.arrayValue == nil { throw ParseError(.incorrectType, "array operator on a field that is not an array") }
    } else if args[0] != .null {
        throw ParseError(.incorrectType, "array operator on a field that is not an array")
    }
    guard case .text(let itemsText) = args[1], case .array(let items) = try JSON.parse(itemsText),
          case .text(let opName) = args[2] else {
        throw ParseError.internalError("mb_array_op: bad arguments")
    }
    guard let op = FieldChange.ArrayOp(rawValue: opName) else { throw ParseError.internalError("mb_array_op: unknown op \(opName)") }
    return .text(try FieldChange.arrayResult(current, items, op).jsonString)
}
