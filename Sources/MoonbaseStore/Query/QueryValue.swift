import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// A value from a query, classified by its Parse encoding.
enum QueryValue {
    case null
    case bool(Bool)
    case number(SQLiteValue)
    case string(String)
    /// Milliseconds since the epoch.
    case date(Int64)
    case pointer(className: String, objectId: String)
    case geoPoint(latitude: Double, longitude: Double)
    case file(name: String)
    /// A plain JSON object or array, as compact JSON text.
    case json(String)

    init(_ v: JSONValue) throws(ParseError) {
        switch v {
        case .null: self = .null
        case .bool(let b): self = .bool(b)
        case .int(let i): self = .number(.integer(i))
        case .double(let d): self = .number(.real(d))
        case .string(let s): self = .string(s)
        case .array: self = .json(JSON.encodeString(v))
        case .object(let o):
            guard let type = o["__type"] else { self = .json(JSON.encodeString(v)); return }
            switch type.stringValue {
            case "Date":
                guard let iso = o["iso"]?.stringValue, let ms = ISO8601.parse(iso) else {
                    throw ParseError(.incorrectType, "invalid Date: expected {\"__type\":\"Date\",\"iso\":…}")
                }
                self = .date(ms)
            case "Pointer", "Object":
                guard let cls = o["className"]?.stringValue, let id = o["objectId"]?.stringValue else {
                    throw ParseError(.incorrectType, "invalid Pointer: className and objectId are required")
                }
                self = .pointer(className: cls, objectId: id)
            case "GeoPoint":
                self = try QueryValue.geoPoint(v)
            case "File":
                guard let name = o["name"]?.stringValue else {
                    throw ParseError(.incorrectType, "invalid File: name is required")
                }
                self = .file(name: name)
            default:
                throw ParseError(.invalidQuery, "cannot query with a value of type \(type.stringValue ?? "?")")
            }
        }
    }

    /// A GeoPoint value, validated (latitude in −90…90, longitude in −180…180).
    static func geoPoint(_ v: JSONValue) throws(ParseError) -> QueryValue {
        guard v.parseType == "GeoPoint", let lat = v["latitude"]?.doubleValue, let lng = v["longitude"]?.doubleValue else {
            throw ParseError(.invalidQuery, "expected a GeoPoint {\"__type\":\"GeoPoint\",\"latitude\":…,\"longitude\":…}")
        }
        guard lat >= -90, lat <= 90, lng >= -180, lng <= 180 else {
            throw ParseError(.invalidQuery, "GeoPoint out of range: latitude must be in [-90, 90], longitude in [-180, 180]")
        }
        return .geoPoint(latitude: lat, longitude: lng)
    }

    var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "Boolean"
        case .number: return "Number"
        case .string: return "String"
        case .date: return "Date"
        case .pointer: return "Pointer"
        case .geoPoint: return "GeoPoint"
        case .file: return "File"
        case .json: return "Object"
        }
    }
}

extension QueryCompiler {
    /// The SQL expression and bound value comparing `field` with a scalar-like `value`.
    /// Typed values pick the matching canonical expression (a Pointer compares its objectId,
    /// a Date its ISO text, `createdAt`/`updatedAt` their milliseconds).
    func operand(_ field: FieldRef, _ value: QueryValue) throws(ParseError) -> (expr: String, bind: SQLiteValue) {
        func mismatch() -> ParseError {
            ParseError(.incorrectType, "field \(field.path) is a \(field.declared?.rawValue ?? "?") and cannot be compared with a \(value.typeName)")
        }
        switch field.kind {
        case .objectId:
            switch value {
            case .string(let s): return ("objectId", .text(s))
            case .pointer(_, let id): return ("objectId", .text(id))
            default: throw mismatch()
            }
        case .time:
            switch value {
            case .date(let ms): return (field.path, .integer(ms))
            case .string(let s):
                guard let ms = ISO8601.parse(s) else { throw mismatch() }
                return (field.path, .integer(ms))
            case .number(let n): return (field.path, n)
            default: throw mismatch()
            }
        case .json:
            break
        }
        switch field.declared {
        case .date?:
            switch value {
            case .date(let ms): return (field.expr(.date), .text(ISO8601.format(millis: ms)))
            case .string(let s):
                guard let ms = ISO8601.parse(s) else { throw mismatch() }
                return (field.expr(.date), .text(ISO8601.format(millis: ms)))
            default: throw mismatch()
            }
        case .pointer?:
            guard case .pointer(_, let id) = value else { throw mismatch() }
            return (field.expr(.pointer), .text(id))
        case .number?:
            guard case .number(let n) = value else { throw mismatch() }
            return (field.expr(nil), n)
        case .string?:
            guard case .string(let s) = value else { throw mismatch() }
            return (field.expr(nil), .text(s))
        case .boolean?:
            guard case .bool(let b) = value else { throw mismatch() }
            return (field.expr(nil), .integer(b ? 1 : 0))
        case .file?:
            guard case .file(let name) = value else { throw mismatch() }
            return ("json_extract(data,'$.\(field.path).name')", .text(name))
        case .geoPoint?, .acl?, .bytes?, .polygon?, .relation?:
            throw ParseError(.invalidQuery, "field \(field.path) is a \(field.declared!.rawValue): use a geo operator or query another field")
        case .object?, .array?, nil:
            switch value {
            case .date(let ms): return (field.expr(.date), .text(ISO8601.format(millis: ms)))
            case .pointer(_, let id): return (field.expr(.pointer), .text(id))
            case .file(let name): return ("json_extract(data,'$.\(field.path).name')", .text(name))
            case .number(let n): return (field.expr(nil), n)
            case .string(let s): return (field.expr(nil), .text(s))
            case .bool(let b): return (field.expr(nil), .integer(b ? 1 : 0))
            case .json(let text): return (field.expr(nil), .text(text))
            case .geoPoint, .null: throw mismatch()
            }
        }
    }

    /// The condition comparing one element of an array field (`json_each` row: `value`, `type`)
    /// with `value` using `op` (`=`, `<`, …).
    func elementCondition(_ value: QueryValue, op: String) throws(ParseError) -> Frag {
        if dialect == .postgres { return try pgElementCondition(value, op: op) }
        switch value {
        // Only object elements have fields: json_extract on a string element (json_each gives its
        // unquoted text) would fail as malformed JSON.
        case .pointer(_, let id): return Frag("CASE WHEN type='object' THEN json_extract(value,'$.objectId') END \(op) ?", [.text(id)])
        case .date(let ms): return Frag("CASE WHEN type='object' THEN json_extract(value,'$.iso') END \(op) ?", [.text(ISO8601.format(millis: ms))])
        case .file(let name): return Frag("CASE WHEN type='object' THEN json_extract(value,'$.name') END \(op) ?", [.text(name)])
        case .number(let n): return Frag("type IN ('integer','real') AND value \(op) ?", [n])
        case .string(let s): return Frag("type='text' AND value \(op) ?", [.text(s)])
        case .bool(let b):
            guard op == "=" else { throw ParseError(.invalidQuery, "booleans only compare for equality") }
            return Frag("type=?", [.text(b ? "true" : "false")])
        case .json(let text): return Frag("type IN ('object','array') AND value \(op) json(?)", [.text(text)])
        case .null: return Frag("type='null'")
        case .geoPoint(let lat, let lng):
            return Frag("CASE WHEN type='object' THEN json_extract(value,'$.latitude')=? AND json_extract(value,'$.longitude')=? END", [.real(lat), .real(lng)])
        }
    }

    /// `EXISTS` over the elements of an array field.
    func anyElement(_ field: FieldRef, _ cond: Frag) -> Frag {
        if dialect == .postgres { return pgAnyElement(field, cond) }
        return Frag("EXISTS(SELECT 1 FROM json_each(data,\(field.jsonPath)) WHERE \(cond.sql))", cond.binds)
    }

    /// Whether `field` holds arrays (declared Array), so scalar constraints test its elements.
    func isArray(_ field: FieldRef) -> Bool { field.kind == .json && field.declared == .array }

    /// `field == value` with Parse's semantics (null matches missing; arrays contain scalars).
    func equality(_ field: FieldRef, _ raw: JSONValue) throws(ParseError) -> Frag {
        let value = try QueryValue(raw)
        if dialect == .postgres { return try pgEquality(field, raw, value) }
        if case .null = value {
            return field.kind == .json ? Frag("\(field.expr(nil)) IS NULL") : .alwaysFalse
        }
        if isArray(field) {
            if case .json(let text) = value, raw.arrayValue != nil {
                return Frag("\(field.expr(nil)) = json(?)", [.text(text)])
            }
            return anyElement(field, try elementCondition(value, op: "="))
        }
        if field.declared == .geoPoint {
            guard case .geoPoint(let lat, let lng) = value else {
                throw ParseError(.incorrectType, "field \(field.path) is a GeoPoint and cannot be compared with a \(value.typeName)")
            }
            return Frag("json_extract(data,'$.\(field.path).latitude')=? AND json_extract(data,'$.\(field.path).longitude')=?",
                        [.real(lat), .real(lng)])
        }
        if case .json(let text) = value {
            return Frag("\(field.expr(nil)) = json(?)", [.text(text)])
        }
        let (expr, bind) = try operand(field, value)
        return Frag("\(expr) = ?", [bind])
    }
}
