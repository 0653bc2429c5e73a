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
