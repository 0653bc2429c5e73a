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
        findAccess(className, viewer) != .denied
    }

    /// Class permission `find` for the viewer, as REST decides it (roles, `requiresAuthentication`,
    /// pointer permissions): events follow `find` (`get` alone does not admit a subscriber).
    public func findAccess(_ className: String, _ viewer: Viewer) -> ClassAccess {
        if viewer.identity.isMaster { return .allowed }
        if ClassPermissions.masterOnlyClasses.contains(className) { return .denied }
        guard let clp = host.classPermissions(className) else { return .allowed }
        var identity = viewer.identity
        if let uid = identity.userId { identity = .user(uid, roles: viewer.roles.sorted()) }
        return ClassPermissions.access(clp, .find, identity)
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

    /// Whether the viewer may read the object (master view): its ACL, and the pointer
    /// permissions of the class (`readUserFields` / `pointerFields`: only objects whose pointer
    /// fields name the viewer), as a REST find would filter it.
    public func canRead(_ object: JSONObject, className: String, _ viewer: Viewer) -> Bool {
        if viewer.identity.isMaster { return true }
        if case .pointerFields(let fields) = findAccess(className, viewer) {
            guard let uid = viewer.identity.userId,
                  ClassPermissions.pointerFieldsAdmit(fields, object: object, userId: uid) else { return false }
        }
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
