/// Who is making a call: the master key, a logged-in user, or nobody.
///
/// Every store operation takes one; ACLs and class-level permissions are decided from it.
public enum Identity: Sendable, Hashable {
    case master
    case user(String)
    case anonymous

    public var isMaster: Bool { if case .master = self { return true } else { return false } }
    public var userId: String? { if case .user(let id) = self { return id } else { return nil } }
}
