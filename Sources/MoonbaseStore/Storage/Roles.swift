import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Synchronization

/// Parse roles: `_Role` objects with a unique `name`, an ACL, and two Relations, `users` and
/// `roles`. A user holds a role when it is in the role's `users` relation, and also every role
/// whose `roles` relation lists a role it holds (Parse's hierarchy: if role A's `roles` holds
/// role B, B's users get A's rights). An `Identity` carries the names of the roles its user
/// holds; ACL and class-permission checks match `role:NAME` entries against them.
public enum Roles {
    public static let className = "_Role"
    /// Every `_Role` has these two Relations.
    static let relationFields: [(String, FieldInfo)] = [
        ("users", FieldInfo(type: .relation, targetClass: "_User")), ("roles", FieldInfo(type: .relation, targetClass: "_Role")),
    ]

    /// `^[A-Za-z0-9_ -]+$`, at most 64 bytes.
    public static func isValidName(_ name: String) -> Bool {
        let u = name.utf8
        guard !u.isEmpty, u.count <= 64 else { return false }
        return u.allSatisfy { ClassPermissions.isIdChar($0) || $0 == 0x20 }
    }

    /// The rules Parse applies to `_Role` writes: on create a valid `name` and an ACL; the name
    /// never changes afterwards and stays unique.
    /// - Throws: 142 for a missing or malformed name or a missing ACL, 137 for a taken name.
    static func checkCreate(_ fields: JSONObject, acl: JSONValue?, in tx: WriteTransaction) throws(ParseError) {
        let name = try validateCreate(fields, acl: acl)
        try tx.storeContext().catalog.ensureClass(className, in: tx)
        // Names are looked up on every role create; the index also makes them unique in SQLite.
        try tx.connection.execute(
            "CREATE UNIQUE INDEX IF NOT EXISTS \"_Role__name\" ON \(Naming.table(className))(json_extract(data,'$.name'))")
        let taken = try tx.connection.scalar(
            "SELECT 1 FROM \(Naming.table(className)) WHERE json_extract(data,'$.name') = ? LIMIT 1", [.text(name)])
        if taken != nil { throw ParseError(.duplicateValue, "A role with the name \(name) already exists.") }
    }

    /// The backend-neutral part of `checkCreate`: a valid name and an ACL. - Returns: the name.
    static func validateCreate(_ fields: JSONObject, acl: JSONValue?) throws(ParseError) -> String {
        guard let name = fields["name"]?.stringValue else { throw ParseError(.validationError, "A role must have a name.") }
        guard isValidName(name) else {
            throw ParseError(.validationError, "A role's name can only contain alphanumeric characters, _, - and spaces.")
        }
        var aclGiven = acl ?? fields["ACL"]
        if aclGiven?.isNull == true { aclGiven = nil }
        guard aclGiven != nil else { throw ParseError(.validationError, "A role must have an ACL.") }
        return name
    }

    static func checkUpdate(_ changes: JSONObject) throws(ParseError) {
        if changes["name"] != nil { throw ParseError(.validationError, "A role's name can only be set before it has been saved.") }
        if let acl = changes["ACL"], acl.isNull { throw ParseError(.validationError, "A role must have an ACL.") }
    }

    /// The names of the roles `userId` holds, hierarchy included, read on `conn` (no cache).
    public static func resolve(userId: String, catalog: SchemaCatalog, on conn: Connection) throws(ParseError) -> [String] {
        guard let s = catalog.schema(className), s.fields["users"]?.type == .relation else { return [] }
        let users = Naming.joinTable(className, "users")
        var sql = "WITH RECURSIVE held(id) AS (SELECT owningId FROM \(users) WHERE relatedId = ?"
        if s.fields["roles"]?.type == .relation {
            sql += " UNION SELECT j.owningId FROM \(Naming.joinTable(className, "roles")) j JOIN held ON j.relatedId = held.id"
        }
        sql += ") SELECT DISTINCT json_extract(r.data,'$.name') FROM \(Naming.table(className)) r JOIN held ON r.objectId = held.id ORDER BY 1"
        var out: [String] = []
        try conn.query(sql, [.text(userId)]) { (row) throws(ParseError) in
            if let n = row.text(0), isValidName(n) { out.append(n) }
        }
        return out
    }
}

/// Role membership per user, cached until the next committed `_Role` write (any such write
/// bumps the generation after commit; an entry computed under an older generation is stale).
/// A lookup reads the generation before reading the database, so a write that commits during
/// the lookup leaves the entry stale rather than caching the old answer as new.
public final class RoleCache: Sendable {
    private struct State {
        var generation: UInt64 = 0
        var byUser: [String: (generation: UInt64, roles: [String])] = [:]
    }
    private let state = Mutex(State())
    /// Entries kept at most; the cache is cleared when it grows past this.
    static let capacity = 10_000

    public init() {}

    /// The cached roles of `userId`, else `compute()`'s answer (cached under the generation
    /// current before it ran).
    public func roles(of userId: String, compute: () throws(ParseError) -> [String]) throws(ParseError) -> [String] {
        let gen: UInt64 = state.withLock { s in s.generation }
        if let hit = state.withLock({ s in s.byUser[userId] }), hit.generation == gen { return hit.roles }
        let roles = try compute()
        state.withLock { s in
            if s.byUser.count >= Self.capacity { s.byUser.removeAll(keepingCapacity: true) }
            s.byUser[userId] = (gen, roles)
        }
        return roles
    }

    /// Marks every cached membership stale once `tx` commits.
    public func invalidate(after tx: WriteTransaction) {
        tx.onCommit { [self] in state.withLock { s in s.generation &+= 1; s.byUser.removeAll(keepingCapacity: true) } }
    }

    /// Current generation (tests, realtime subscribers checking whether to recompute).
    public var generation: UInt64 { state.withLock { $0.generation } }
}

extension SQLiteDocumentStore {
    /// Whether `identity` may see `object` through `op` (`get`/`find`): the class permission
    /// (roles and pointer permissions included) and the object's ACL. For checks made outside SQL,
    /// such as deciding which subscribers an event reaches.
    public func canSee(_ object: StoredObject, identity: Identity, op: ClassOperation = .find) throws(ParseError) -> Bool {
        switch catalog.access(op, object.className, identity) {
        case .denied: return false
        case .allowed: return object.canRead(identity)
        case .pointerFields(let fields):
            guard let uid = identity.userId, object.canRead(identity) else { return false }
            return ClassPermissions.pointerFieldsAdmit(fields, object: try object.fields(), userId: uid)
        }
    }

    /// The roles `userId` holds (names without `role:`), cached per user until a `_Role` write.
    public func roles(ofUser userId: String) throws(ParseError) -> [String] {
        let catalog = self.catalog
        return try context.roles.roles(of: userId) { () throws(ParseError) -> [String] in
            try database.read { (c) throws(ParseError) -> [String] in try Roles.resolve(userId: userId, catalog: catalog, on: c) }
        }
    }

    /// The identity of a logged-in user, carrying its roles: what REST, Lua and realtime hand
    /// to every permission check.
    public func identity(forUser userId: String) throws(ParseError) -> Identity {
        .user(userId, roles: try roles(ofUser: userId))
    }
}
