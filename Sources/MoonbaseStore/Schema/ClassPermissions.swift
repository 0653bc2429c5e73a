import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// An operation governed by class-level permissions (Parse's CLP keys).
public enum ClassOperation: String, Sendable, CaseIterable {
    case find, get, count, create, update, delete, addField

    /// Reads (`get`, `find`, `count`) fall back to `readUserFields`, the others to `writeUserFields`.
    public var isRead: Bool { self == .find || self == .get || self == .count }
}

/// What class-level permissions let a caller do for one operation.
public enum ClassAccess: Sendable, Equatable {
    /// Every object the ACLs admit.
    case allowed
    /// Nothing: 119.
    case denied
    /// Only objects whose listed fields point to the caller (a `_User` Pointer, or an array of
    /// them holding the caller): Parse's pointer permissions (`pointerFields`,
    /// `readUserFields`, `writeUserFields`).
    case pointerFields([String])
}

/// Class-level permissions: for each operation a map of `"*"`, user ids, `role:Name` entries or
/// `"requiresAuthentication"` to `true`, plus Parse's pointer permissions (`"pointerFields":
/// ["owner"]` inside an operation, and the class-wide `readUserFields` / `writeUserFields`
/// lists). An operation without an entry is public; an empty map allows only the master key
/// (and Cloud Code calls made with `master = true`). `_Session`, `_JobStatus` and `_Usage` are
/// master-only whatever their CLP says.
public enum ClassPermissions {
    public static let masterOnlyClasses: Set<String> = ["_Session", "_JobStatus", "_Usage"]
    static let userFieldKeys = ["readUserFields", "writeUserFields"]

    /// Validates a CLP document (`setClassPermissions`, `PUT /parse/schemas`).
    /// - Throws: `ParseError` 107 for an unknown operation or a malformed entry.
    public static func validate(_ clp: JSONObject) throws(ParseError) -> JSONObject {
        var out = JSONObject()
        for e in clp {
            if userFieldKeys.contains(e.key) {
                out[e.key] = .array(try fieldList(e.value, what: e.key).map { .string($0) })
                continue
            }
            guard ClassOperation(rawValue: e.key) != nil else {
                throw ParseError(.invalidJSON, "unknown class permission: \(e.key)")
            }
            guard let m = e.value.objectValue else {
                throw ParseError(.invalidJSON, "class permission \(e.key) must be an object")
            }
            var entry = JSONObject()
            for p in m {
                if p.key == "pointerFields" {
                    entry[p.key] = .array(try fieldList(p.value, what: "\(e.key).pointerFields").map { .string($0) })
                    continue
                }
                let validKey = p.key == "*" || p.key == "requiresAuthentication"
                    || (p.key.hasPrefix("role:") && Roles.isValidName(String(p.key.dropFirst(5))))
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

    static func fieldList(_ v: JSONValue, what: String) throws(ParseError) -> [String] {
        guard let a = v.arrayValue else { throw ParseError(.invalidJSON, "\(what) must be an array of field names") }
        var out: [String] = []
        for x in a {
            guard let s = x.stringValue, Naming.isValidFieldName(s) else {
                throw ParseError(.invalidJSON, "\(what) must be an array of field names")
            }
            if !out.contains(s) { out.append(s) }
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
        for k in userFieldKeys { if let v = clp[k] { out[k] = v } }
        return out
    }

    /// What `identity` may do for `op` under `clp`. Master always may; `*`, a missing entry,
    /// `requiresAuthentication` (any user), the user's id or one of its roles allow it; failing
    /// those, a user is limited to the objects its pointer fields name (`pointerFields` of the
    /// operation plus `readUserFields` or `writeUserFields`), except for `create`, which pointer
    /// permissions never grant (as in Parse Server).
    public static func access(_ clp: JSONObject, _ op: ClassOperation, _ identity: Identity) -> ClassAccess {
        if identity.isMaster { return .allowed }
        guard let e = clp[op.rawValue]?.objectValue else { return .allowed }
        if e["*"]?.boolValue == true { return .allowed }
        guard let uid = identity.userId else { return .denied }
        if e["requiresAuthentication"]?.boolValue == true || e[uid]?.boolValue == true { return .allowed }
        for r in identity.roles where e["role:" + r]?.boolValue == true { return .allowed }
        guard op != .create else { return .denied }
        var fields = (e["pointerFields"]?.arrayValue ?? []).compactMap(\.stringValue)
        for f in (clp[op.isRead ? "readUserFields" : "writeUserFields"]?.arrayValue ?? []).compactMap(\.stringValue)
            where !fields.contains(f) { fields.append(f) }
        return fields.isEmpty ? .denied : .pointerFields(fields)
    }

    /// Whether `identity` may perform `op` at all (for pointer permissions: on some objects).
    public static func allows(_ clp: JSONObject, _ op: ClassOperation, _ identity: Identity) -> Bool {
        access(clp, op, identity) != .denied
    }

    /// SQL condition (over the row's `data` column, unqualified) true when one of `fields` points
    /// to `userId`: a Pointer field by its objectId, an array field by one of its elements. Field
    /// names were validated when the CLP was set; the user id is bound.
    public static func pointerCondition(_ fields: [String], userId: String) -> (sql: String, binds: [SQLiteValue]) {
        var parts: [String] = []
        var binds: [SQLiteValue] = []
        for f in fields where Naming.isValidFieldName(f) {
            parts.append("(CASE json_type(data,'$.\(f)') WHEN 'array' THEN EXISTS(SELECT 1 FROM json_each(data,'$.\(f)') "
                + "WHERE CASE WHEN type='object' THEN json_extract(value,'$.objectId') END = ?) "
                + "WHEN 'object' THEN json_extract(data,'$.\(f).objectId') = ? ELSE 0 END)")
            binds += [.text(userId), .text(userId)]
        }
        if parts.isEmpty { return ("0", []) }
        return ("(" + parts.joined(separator: " OR ") + ")", binds)
    }

    /// The same test in Swift over an object's fields (for checks made outside SQL, such as
    /// realtime events): one of `fields` is a Pointer to `userId` or an array holding one.
    public static func pointerFieldsAdmit(_ fields: [String], object: JSONObject, userId: String) -> Bool {
        func isUser(_ v: JSONValue) -> Bool { v.parseType == "Pointer" && v["objectId"]?.stringValue == userId }
        for f in fields {
            guard let v = object[f] else { continue }
            if isUser(v) { return true }
            if let a = v.arrayValue, a.contains(where: isUser) { return true }
        }
        return false
    }
}
