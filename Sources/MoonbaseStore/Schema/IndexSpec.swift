import MoonbaseCore
import MoonbaseJSON

/// One declared index, from Parse's `indexes` format. Accepted JSON shapes (the stored form is
/// the declared one):
///
/// - `{"post": 1, "createdAt": -1}`: a B-tree expression index, fields in order, 1 / -1 direction;
/// - `{"fields": {"post": 1, "user": 1}, "unique": true}`: the same, unique (violations → 137);
///   `cloud.index(C, {"post","user"}, {unique = true})` produces this shape;
/// - `{"text": "text", "title": "text"}`: a full-text index (one FTS5 table over those fields);
/// - `{"location": "2dsphere"}`: accepted as a no-op (every GeoPoint field has its R*Tree).
///
/// Index names are identifiers (`^[A-Za-z_][A-Za-z0-9_]*$`, ≤ 64 bytes); field paths are
/// validated like query paths.
public struct IndexSpec: Sendable, Equatable {
    public struct Field: Sendable, Equatable {
        public var path: String
        public var descending: Bool
    }

    public var name: String
    public var fields: [Field]
    public var unique: Bool
    public var isText: Bool
    /// Only `2dsphere` entries: nothing to build.
    public var isGeoOnly: Bool

    /// Parses and validates a spec.
    /// - Throws: `ParseError` 105 for a bad index or field name, 107 for a malformed spec.
    public init(name: String, json: JSONValue) throws(ParseError) {
        guard Self.isValidIndexName(name) else { throw ParseError(.invalidKeyName, "invalid index name: \(name)") }
        guard var body = json.objectValue, !body.isEmpty else {
            throw ParseError(.invalidJSON, "index \(name) must be an object of fields")
        }
        self.name = name
        unique = false
        if let inner = body["fields"], body.entries.allSatisfy({ $0.key == "fields" || $0.key == "unique" }) {
            guard let f = inner.objectValue, !f.isEmpty else { throw ParseError(.invalidJSON, "index \(name): fields must be an object") }
            if let u = body["unique"] {
                guard let b = u.boolValue else { throw ParseError(.invalidJSON, "index \(name): unique must be a boolean") }
                unique = b
            }
            body = f
        }
        var fields: [Field] = []
        var text = 0, geo = 0
        for e in body {
            guard Naming.isValidFieldPath(e.key) || ["objectId", "createdAt", "updatedAt"].contains(e.key) else {
                throw ParseError(.invalidKeyName, "invalid field name in index \(name): \(e.key)")
            }
            switch e.value {
            case .string("text"): text += 1; fields.append(Field(path: e.key, descending: false))
            case .string("2dsphere"): geo += 1
            default:
                guard let d = e.value.intValue, d == 1 || d == -1 else {
                    throw ParseError(.invalidJSON, "index \(name): \(e.key) must be 1, -1, \"text\" or \"2dsphere\"")
                }
                fields.append(Field(path: e.key, descending: d == -1))
            }
        }
        guard fields.count <= 16 else { throw ParseError(.invalidJSON, "index \(name) has too many fields") }
        guard text == 0 || text == fields.count else {
            throw ParseError(.invalidJSON, "index \(name) mixes text and ordered fields")
        }
        guard !(text > 0 && unique) else { throw ParseError(.invalidJSON, "a text index cannot be unique") }
        self.fields = fields
        isText = text > 0
        isGeoOnly = fields.isEmpty && geo > 0
    }

    static func isValidIndexName(_ s: String) -> Bool {
        let u = Array(s.utf8)
        guard !u.isEmpty, u.count <= 64 else { return false }
        func ok(_ c: UInt8, first: Bool) -> Bool {
            (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 95 || (!first && c >= 48 && c <= 57)
        }
        return ok(u[0], first: true) && u.dropFirst().allSatisfy { ok($0, first: false) }
    }

    /// Whether the index expression of this spec depends on one of `names`' types (a Pointer
    /// indexes its objectId, a Date its ISO text), so it must be rebuilt when they are learnt.
    func dependsOnType(of names: Set<String>) -> Bool {
        !isText && fields.contains { names.contains(String($0.path.split(separator: ".").first ?? "")) }
    }
}
