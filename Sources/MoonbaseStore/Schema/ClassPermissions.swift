import MoonbaseCore
import MoonbaseJSON

/// An operation governed by class-level permissions (Parse's CLP keys).
public enum ClassOperation: String, Sendable, CaseIterable {
    case find, get, count, create, update, delete, addField
}

/// Class-level permissions: for each operation a map of `"*"`, user ids (and `role:Name`
/// entries, stored for compatibility) or `"requiresAuthentication"` to `true`. An operation
/// without an entry is public; an empty map allows only the master key (and Cloud Code calls
/// made with `master = true`). `_Session`, `_JobStatus` and `_Usage` are master-only whatever
/// their CLP says (DESIGN §10).
public enum ClassPermissions {
    public static let masterOnlyClasses: Set<String> = ["_Session", "_JobStatus", "_Usage"]

    /// Validates a CLP document (`setClassPermissions`, `PUT /parse/schemas`).
    /// - Throws: `ParseError` 107 for an unknown operation or a malformed entry.
    public static func validate(_ clp: JSONObject) throws(ParseError) -> JSONObject {
        var out = JSONObject()
        for e in clp {
            guard ClassOperation(rawValue: e.key) != nil else {
                throw ParseError(.invalidJSON, "unknown class permission: \(e.key)")
            }
            guard let m = e.value.objectValue else {
                throw ParseError(.invalidJSON, "class permission \(e.key) must be an object")
            }
            var entry = JSONObject()
            for p in m {
                let validKey = p.key == "*" || p.key == "requiresAuthentication" || p.key.hasPrefix("role:")
                    || (!p.key.isEmpty && p.key.utf8.count <= 64 && p.key.utf8.allSatisfy { isIdChar($0) })
                guard validKey else { throw ParseError(.invalidJSON, "invalid entry in class permission \(e.key): \(p.key)") }
                guard let b = p.value.boolValue else {
                    throw ParseError(.invalidJSON, "class permission \(e.key).\(p.key) must be a boolean")
                }
                if b { entry[p.key] = .bool(true) }
            }
            out[e.key] = .object(entry)
        }
        return out
    }

    static func isIdChar(_ c: UInt8) -> Bool {
        (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 95 || c == 45
    }

    /// The CLP with every operation present (public ones as `{"*": true}`), Parse's output shape.
    public static func effective(_ clp: JSONObject) -> JSONObject {
        var out = JSONObject()
        for op in ClassOperation.allCases { out[op.rawValue] = clp[op.rawValue] ?? ["*": true] }
        return out
    }

    /// Whether `identity` may perform `op` under `clp` (master always may).
    public static func allows(_ clp: JSONObject, _ op: ClassOperation, _ identity: Identity) -> Bool {
        if identity.isMaster { return true }
        guard let entry = clp[op.rawValue]?.objectValue else { return true }
        if entry["*"]?.boolValue == true { return true }
        guard let uid = identity.userId else { return false }
        return entry["requiresAuthentication"]?.boolValue == true || entry[uid]?.boolValue == true
    }
}
