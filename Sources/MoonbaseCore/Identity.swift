/// Who is making a call: the master key, a logged-in user, or nobody.
///
/// Every store operation takes one; ACLs and class-level permissions are decided from it. A
/// user identity carries the names of the roles the user holds (directly or through the role
/// hierarchy), resolved when the caller is authenticated (`SQLiteDocumentStore.identity(forUser:)`),
/// so every ACL and class-permission check honours `role:NAME` entries without a lookup of its own.
/// Match it with `identity.userId` / `identity.roles` rather than destructuring the case.
public enum Identity: Sendable, Hashable {
    case master
    case user(String, roles: [String] = [])
    case anonymous

    public var isMaster: Bool { if case .master = self { return true } else { return false } }
    public var userId: String? { if case .user(let id, _) = self { return id } else { return nil } }
    /// Role names (without the `role:` prefix) the user holds; empty for master and anonymous.
    public var roles: [String] { if case .user(_, let r) = self { return r } else { return [] } }
}
