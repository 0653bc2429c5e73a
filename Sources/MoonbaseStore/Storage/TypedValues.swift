import MoonbaseCore
import MoonbaseJSON

/// Validation and canonical forms of field values (Parse's JSON encoding).
///
/// - Date `{"__type":"Date","iso":…}`: any ISO-8601 instant, stored as canonical UTC with ms
///   (`2026-11-29T20:23:45.678Z`), so stored dates compare correctly as text;
/// - GeoPoint: numeric `latitude` −90…90 and `longitude` −180…180;
/// - Pointer: a valid class name and a string `objectId` (a full `Object` becomes a Pointer);
/// - File: a string `name`, optional string `url`; Bytes: a string `base64`;
/// - nested objects: keys may not start with `$` or contain `.` (105); arrays and nested values
///   are canonicalised recursively. Errors: 111 for malformed typed values, 106 for pointers.
enum TypedValues {
    /// The canonical value and its field type (nil for `null`, which has no type).
    static func canonical(_ v: JSONValue, field: String) throws(ParseError) -> (JSONValue, FieldInfo?) {
        switch v {
        case .null: return (.null, nil)
        case .bool: return (v, FieldInfo(type: .boolean))
        case .int, .double: return (v, FieldInfo(type: .number))
        case .string: return (v, FieldInfo(type: .string))
        case .array(let a): return (.array(try a.map { (x) throws(ParseError) in try nested(x, field: field) }), FieldInfo(type: .array))
        case .object(let o):
            if let t = o["__type"] {
                let c = try typed(o, type: t, field: field)
                return c
            }
            return (try plainObject(o, field: field), FieldInfo(type: .object))
        }
    }

    static func nested(_ v: JSONValue, field: String) throws(ParseError) -> JSONValue {
        switch v {
        case .array(let a): return .array(try a.map { (x) throws(ParseError) in try nested(x, field: field) })
        case .object(let o):
            if let t = o["__type"] { return try typed(o, type: t, field: field).0 }
            return try plainObject(o, field: field)
        default: return v
        }
    }

    static func plainObject(_ o: JSONObject, field: String) throws(ParseError) -> JSONValue {
        var out = JSONObject()
        for e in o {
            if e.key.hasPrefix("$") || e.key.contains(".") || e.key.hasPrefix("__op") {
                throw ParseError(.invalidKeyName, "invalid field name: \(field).\(e.key)")
            }
            out.entries.append(.init(e.key, try nested(e.value, field: field)))
        }
        return .object(out)
    }

    static func typed(_ o: JSONObject, type: JSONValue, field: String) throws(ParseError) -> (JSONValue, FieldInfo) {
        switch type.stringValue {
        case "Date"?:
            guard let iso = o["iso"]?.stringValue, let ms = ISO8601.parse(iso) else {
                throw ParseError(.incorrectType, "invalid Date for \(field)")
            }
            return (date(ms), FieldInfo(type: .date))
        case "GeoPoint"?:
            guard let lat = o["latitude"]?.doubleValue, let lng = o["longitude"]?.doubleValue,
                  lat >= -90, lat <= 90, lng >= -180, lng <= 180 else {
                throw ParseError(.incorrectType, "invalid GeoPoint for \(field): latitude must be in -90...90 and longitude in -180...180")
            }
            return (["__type": "GeoPoint", "latitude": .double(lat), "longitude": .double(lng)], FieldInfo(type: .geoPoint))
        case "Pointer"?, "Object"?:
            guard let cls = o["className"]?.stringValue, Naming.isValidClassName(cls),
                  let id = o["objectId"]?.stringValue, !id.isEmpty, id.utf8.count <= 64 else {
                throw ParseError(.invalidPointer, "invalid Pointer for \(field)")
            }
            return (pointer(cls, id), FieldInfo(type: .pointer, targetClass: cls))
        case "File"?:
            guard let name = o["name"]?.stringValue, !name.isEmpty else {
                throw ParseError(.incorrectType, "invalid File for \(field): name required")
            }
            var f: JSONObject = ["__type": "File", "name": .string(name)]
            if let url = o["url"] {
                guard let u = url.stringValue else { throw ParseError(.incorrectType, "invalid File for \(field): url must be a string") }
                f["url"] = .string(u)
            }
            return (.object(f), FieldInfo(type: .file))
        case "Relation"?:
            guard let cls = o["className"]?.stringValue, Naming.isValidClassName(cls) else {
                throw ParseError(.incorrectType, "invalid Relation for \(field): className required")
            }
            return (RelationChange.marker(cls), FieldInfo(type: .relation, targetClass: cls))
        case "Polygon"?:
            return (try Polygon.canonical(o, field: field), FieldInfo(type: .polygon))
        case "Bytes"?:
            guard let b = o["base64"]?.stringValue else { throw ParseError(.incorrectType, "invalid Bytes for \(field)") }
            return (["__type": "Bytes", "base64": .string(b)], FieldInfo(type: .bytes))
        default:
            throw ParseError(.incorrectType, "unsupported type for \(field): \(type.stringValue ?? "?")")
        }
    }

    static func date(_ ms: Int64) -> JSONValue { ["__type": "Date", "iso": .string(ISO8601.format(millis: ms))] }
    static func pointer(_ cls: String, _ id: String) -> JSONValue {
        ["__type": "Pointer", "className": .string(cls), "objectId": .string(id)]
    }

    /// Field names a client may write: `^[A-Za-z][A-Za-z0-9_]*$`. Internal `_`-prefixed fields
    /// (`_hashed_password`) only for trusted callers (the auth module).
    static func checkFieldName(_ name: String, allowInternal: Bool) throws(ParseError) {
        if Naming.isValidFieldName(name) { return }
        if allowInternal, name.hasPrefix("_"), Naming.isValidFieldName("x" + name.dropFirst()) { return }
        throw ParseError(.invalidKeyName, "invalid field name: \(name)")
    }
}
