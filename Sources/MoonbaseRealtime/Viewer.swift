import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore

/// Who receives events: the identity a REST request with the same keys would have, the session
/// token it came with (checked again before each delivery, so a revoked session stops at
/// once), and the role names it holds.
public struct Viewer: Sendable, Hashable {
    public var identity: Identity
    /// The session token the identity came from (nil for master and anonymous viewers).
    public var sessionToken: String?
    /// Role names (without the `role:` prefix) whose ACL and class-permission entries admit
    /// this viewer, hierarchy already expanded. Empty until the host knows roles.
    public var roles: Set<String>

    public init(identity: Identity, sessionToken: String? = nil, roles: Set<String> = []) {
        self.identity = identity
        self.sessionToken = sessionToken
        self.roles = roles
    }

    public static let master = Viewer(identity: .master)
    public static let anonymous = Viewer(identity: .anonymous)

    /// The ACL / class-permission keys that admit this viewer: `*`, its user id, `role:Name`s.
    public var permissionKeys: [String] {
        var keys = ["*"]
        if let uid = identity.userId { keys.append(uid) }
        for r in roles.sorted() { keys.append("role:" + r) }
        return keys
    }
}

/// What the realtime engine needs from the rest of the server to decide what a viewer sees:
/// sessions, roles, class permissions and the `afterFind` trigger. The API layer implements it.
///
/// Roles: `roleNames(of:)` is the one place role membership enters (the store's role cache);
/// every ACL and class-permission check honours `role:Name` entries through `Viewer.roles`.
public protocol ViewerHost: Sendable {
    /// The viewer for a session token. - Throws: 209 when the token is unknown or expired.
    func viewer(sessionToken: String) throws(ParseError) -> Viewer
    /// Whether the viewer's session is still valid (always true without a token).
    func isCurrent(_ viewer: Viewer) -> Bool
    /// Role names held by `identity` (hierarchy expanded); empty when roles do not exist.
    func roleNames(of identity: Identity) -> Set<String>
    /// The class's permissions (Parse's CLP document), or nil when it has none / no class.
    func classPermissions(_ className: String) -> JSONObject?
    /// Whether `className` has an `afterFind` trigger.
    func hasAfterFind(_ className: String) -> Bool
    /// Runs the class's `afterFind` as `viewer` (never called for master viewers). Called on
    /// the engine's own delivery thread, never on an I/O thread.
    func afterFind(className: String, objects: [JSONObject], viewer: Viewer) throws(ParseError) -> [JSONObject]
}
