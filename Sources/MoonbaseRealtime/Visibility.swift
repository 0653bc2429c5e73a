import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore

/// The one visibility rule: an event carries an object exactly as a REST get by the viewer
/// would return it. Class permission `find` (with `requiresAuthentication` and `role:` entries),
/// the object's ACL (user id, `*`, roles), hidden fields (`_`-prefixed internals, `_User`'s
/// `password`/`authData`, and `email` of other users), `keys`, then the class's `afterFind`
/// as that viewer (an object it drops is not delivered).
public struct Visibility: Sendable {
    public let host: any ViewerHost

    public init(host: any ViewerHost) { self.host = host }

    /// Whether class permission `find` admits the viewer (master always; the master-only
    /// system classes never admit anyone else).
    public func mayFind(_ className: String, _ viewer: Viewer) -> Bool {
        if viewer.identity.isMaster { return true }
        if ClassPermissions.masterOnlyClasses.contains(className) { return false }
        guard let entry = host.classPermissions(className)?["find"]?.objectValue else { return true }
        if entry["requiresAuthentication"]?.boolValue == true, viewer.identity.userId != nil { return true }
        return viewer.permissionKeys.contains { entry[$0]?.boolValue == true }
    }

    /// Refuses a subscription the viewer could not make as a REST find: 119 without class
    /// permission `find`, 119 when `where`, `keys` or `watch` names a field hidden from it.
    public func check(_ spec: SubscriptionSpec, _ viewer: Viewer) throws(ParseError) {
        guard mayFind(spec.className, viewer) else {
            throw ParseError(.operationForbidden, "Permission denied for action find on class \(spec.className).")
        }
        try ProtectedFields.check(spec.className, where: spec.whereClause, identity: viewer.identity)
        for f in (spec.keys ?? []) + (spec.watch ?? []) {
            try ProtectedFields.check(spec.className, where: nil, field: f, identity: viewer.identity)
        }
    }

    /// Whether the object's ACL (its `ACL` field, master view) lets the viewer read it.
    public func canRead(_ object: JSONObject, _ viewer: Viewer) -> Bool {
        if viewer.identity.isMaster { return true }
        guard let acl = object["ACL"]?.objectValue else { return true }
        return viewer.permissionKeys.contains { acl[$0]?["read"]?.boolValue == true }
    }

    /// Whether a tombstone's stored read permissions (`|id|id|`, nil = public) admit the viewer.
    public func admits(perm: String?, _ viewer: Viewer) -> Bool {
        guard let perm, !viewer.identity.isMaster else { return true }
        return viewer.permissionKeys.dropFirst().contains { perm.contains("|\($0)|") }
    }

    /// The object (master view) as the viewer sees it, before `afterFind`: hidden fields
    /// removed, `keys` applied as REST applies them (nested paths too; `objectId`, `createdAt`,
    /// `updatedAt`, `ACL` always kept), plus `className`.
    public func redact(_ object: JSONObject, className: String, viewer: Viewer, keys: [String]?) -> JSONObject {
        var out = JSONObject()
        out.entries.reserveCapacity(object.count + 1)
        let objectId = object["objectId"]?.stringValue ?? ""
        for e in object where !ProtectedFields.hides(e.key, className: className, objectId: objectId, viewer: viewer.identity) {
            out.entries.append(e)
        }
        if let keys { out = KeyTree(keys).project(out) }  // REST's own projection
        out["className"] = .string(className)
        return out
    }

    /// Applies the class's `afterFind` as the viewer to `objects` (already redacted); returns
    /// the objects it keeps, by objectId. Master viewers and classes without the trigger pass
    /// through. A failing trigger hides the objects (as REST would answer an error).
    public func afterFind(_ className: String, _ objects: [JSONObject], viewer: Viewer) -> [JSONObject] {
        guard !objects.isEmpty, !viewer.identity.isMaster, host.hasAfterFind(className) else { return objects }
        do throws(ParseError) {
            var out = try host.afterFind(className: className, objects: objects, viewer: viewer)
            for i in out.indices where out[i]["className"] == nil { out[i]["className"] = .string(className) }
            return out
        } catch {
            Log.warn("afterFind failed for a realtime event on \(className): \(error.message)")
            return []
        }
    }
}
