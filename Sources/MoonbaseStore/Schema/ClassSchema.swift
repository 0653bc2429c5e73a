import MoonbaseCore
import MoonbaseJSON

/// What the store knows about one class: its fields' types, declared indexes and class-level
/// permissions. A value type: the catalog hands out copies, transactions stage edited copies.
///
/// Persisted as one `_mb_schema` row (`fields`, `indexes`, `clp` as JSON texts).
public struct ClassSchema: Sendable, Equatable {
    public var className: String
    /// Field name → type (reserved columns `objectId`, `createdAt`, `updatedAt`, `ACL` excluded).
    public var fields: [String: FieldInfo]
    /// Field names in the order they first appeared (stable `getSchema` output).
    public var fieldOrder: [String]
    /// Index name → spec, as declared (`IndexSpec` documents the shape).
    public var indexes: JSONObject
    /// Class-level permissions: operation → `{"*": true, "<userId>": true, "requiresAuthentication": true}`.
    public var clp: JSONObject

    public init(className: String, fields: [String: FieldInfo] = [:], fieldOrder: [String] = [],
                indexes: JSONObject = [:], clp: JSONObject = [:]) {
        self.className = className
        self.fields = fields
        self.fieldOrder = fieldOrder
        self.indexes = indexes
        self.clp = clp
    }

    /// Adds a field (no-op when present).
    public mutating func add(_ name: String, _ info: FieldInfo) {
        if fields[name] == nil { fieldOrder.append(name) }
        fields[name] = info
    }

    /// Fields of type GeoPoint (each has an R*Tree side table).
    public var geoFields: [String] { fieldOrder.filter { fields[$0]?.type == .geoPoint } }

    /// Text index name → fields, for the query compiler and FTS maintenance.
    public var textIndexes: [String: [String]] {
        var out: [String: [String]] = [:]
        for e in indexes.entries {
            if let spec = try? IndexSpec(name: e.key, json: e.value), spec.isText { out[e.key] = spec.fields.map(\.path) }
        }
        return out
    }

    /// The compiler's view of this class.
    public var querySchema: QuerySchema {
        QuerySchema(className: className, fields: fields, textIndexes: textIndexes)
    }

    // MARK: JSON (the `_mb_schema.fields` column)

    /// `{"likes":{"type":"Number"},"author":{"type":"Pointer","targetClass":"_User"}}`.
    public var fieldsJSON: JSONObject {
        var o = JSONObject()
        for name in fieldOrder {
            guard let info = fields[name] else { continue }
            var f: JSONObject = ["type": .string(info.type.rawValue)]
            if let t = info.targetClass { f["targetClass"] = .string(t) }
            o[name] = .object(f)
        }
        return o
    }

    static func parseFields(_ v: JSONValue) -> ([String: FieldInfo], [String]) {
        var fields: [String: FieldInfo] = [:]
        var order: [String] = []
        for e in v.objectValue ?? [:] {
            guard let t = e.value["type"]?.stringValue, let type = FieldType(rawValue: t) else { continue }
            fields[e.key] = FieldInfo(type: type, targetClass: e.value["targetClass"]?.stringValue)
            order.append(e.key)
        }
        return (fields, order)
    }

    /// Parse's `GET /parse/schemas/CLASS` shape.
    public var parseJSON: JSONValue {
        var f: JSONObject = [
            "objectId": ["type": "String"], "createdAt": ["type": "Date"],
            "updatedAt": ["type": "Date"], "ACL": ["type": "ACL"],
        ]
        for e in fieldsJSON { f[e.key] = e.value }
        return .object([
            "className": .string(className),
            "fields": .object(f),
            "indexes": .object(indexes),
            "classLevelPermissions": .object(ClassPermissions.effective(clp)),
        ])
    }
}

extension FieldInfo {
    /// "Number", "Pointer<_User>": how type mismatch messages name a type.
    public var displayName: String {
        if type == .pointer || type == .relation, let t = targetClass { return "\(type.rawValue)<\(t)>" }
        return type.rawValue
    }
}
