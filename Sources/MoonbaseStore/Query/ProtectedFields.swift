import MoonbaseCore
import MoonbaseJSON

/// Fields whose values are hidden from some readers must not be usable by those readers in a
/// query either: a `where` on `_User.email` (an equality, a `$regex` prefix, `$gt` bisection),
/// an `order` by it, or a `distinct` over it would reveal what the serializer strips.
/// Non-master callers are refused with 119, as Parse Server refuses queries on protected fields
/// ("This user is not allowed to query email on class _User").
public enum ProtectedFields {
    /// `_User` fields non-master callers may not constrain, sort or list.
    public static let user: Set<String> = ["email", "password", "authData"]

    /// THE rule for what a reader sees of a stored object, used by every serializer (stored
    /// objects, query rows, includes, realtime events): internal `_`-prefixed keys
    /// (`_hashed_password`) are never output; on `_User`, `password` and `authData` never, and
    /// `email` only to the user themself or the master key.
    public static func hides(_ key: String, className: String, objectId: String, viewer: Identity) -> Bool {
        if key.hasPrefix("_") { return true }
        guard className == "_User" else { return false }
        switch key {
        case "password", "authData": return true
        case "email": return !(viewer.isMaster || viewer.userId == objectId)
        default: return false
        }
    }

    /// Whether a class's stored `data` may be copied to a reader as is: only classes whose
    /// fields the rule above never hides (system classes, `_`-prefixed, keep internal fields).
    public static func canSplice(_ className: String) -> Bool { !className.hasPrefix("_") }

    /// Throws 119 when a non-master `identity` names a protected field of `className` in
    /// `where` (at any depth of `$or`/`$and`/`$nor`), in `order`, or as the `distinct` field.
    public static func check(_ className: String, where whereClause: JSONValue?, order: [SortKey] = [],
                             field: String? = nil, identity: Identity) throws(ParseError) {
        guard className == "_User", !identity.isMaster else { return }
        if let w = whereClause { try checkWhere(w, className) }
        for k in order { try checkPath(k.field, className) }
        if let field { try checkPath(field, className) }
    }

    static func checkWhere(_ w: JSONValue, _ className: String) throws(ParseError) {
        guard let o = w.objectValue else { return }
        for e in o {
            if e.key == "$or" || e.key == "$and" || e.key == "$nor" {
                for sub in e.value.arrayValue ?? [] { try checkWhere(sub, className) }
            } else {
                try checkPath(e.key, className)
            }
        }
    }

    static func checkPath(_ path: String, _ className: String) throws(ParseError) {
        let head = path.split(separator: ".", maxSplits: 1).first.map(String.init) ?? path
        if user.contains(head) {
            throw ParseError(.operationForbidden, "This user is not allowed to query \(head) on class \(className)")
        }
    }
}
