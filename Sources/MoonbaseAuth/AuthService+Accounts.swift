import MoonbaseCore
import MoonbaseCrypto
import MoonbaseJSON
import MoonbaseStore

/// Sign-up and login results.
public struct AuthResult: Sendable {
    /// The response body: for sign-up `{objectId, createdAt, sessionToken}` (Parse's 201 shape),
    /// for login the user object as the user sees it plus `sessionToken`.
    public var body: JSONObject
    /// The new session token (also in `body`).
    public var sessionToken: String
    public var userId: String
    public var sessionId: String
}

extension AuthService {
    // MARK: Sign-up

    /// `POST /parse/users`: creates a `_User` and a session.
    ///
    /// `username` and `password` are required (200 / 201); `email` is optional, must look like an
    /// address (125) and be unused by others, compared case-insensitively (203); a taken username
    /// is 202. Other fields are stored as `_User` fields, typed and validated by the store
    /// (`ACL` optional: the default is public read, self write). `sessionToken`, `authData` and
    /// `currentPassword` are ignored. The password is hashed (argon2id) on the calling thread
    /// before the write transaction opens.
    /// - Parameters:
    ///   - identity: the caller; class-level permission `create` on `_User` is checked for it.
    /// - Throws: 200, 201, 202, 203, 125, 105/111/123 (bad fields), 119 (CLP).
    public func signUp(body: JSONObject, ip: String, identity: Identity = .anonymous,
                       installationId: String? = nil) throws(ParseError) -> AuthResult {
        guard let username = body["username"]?.stringValue, !username.isEmpty, username.utf8.count <= 256 else {
            throw ParseError(.usernameMissing, "bad or missing username")
        }
        guard let password = body["password"]?.stringValue, !password.isEmpty else {
            throw ParseError(.passwordMissing, "password is required")
        }
        let email = try Self.email(in: body)
        try store.checkCLP(.create, "_User", identity)
        try checkAvailable(username: username, email: email, except: nil)

        var fields = try Self.clientFields(body)
        fields["_hashed_password"] = .string(Password.hash(password))

        let (user, session) = try store.transaction { () throws(ParseError) -> (StoredObject, IssuedSession) in
            try checkAvailable(username: username, email: email, except: nil)
            // Writes are serialised, so this second check (inside the write) is authoritative;
            // the unique indexes on username and lower(email) back it up.
            let user = try store.insertUser(fields: fields, acl: body["ACL"])
            return (user, try createSession(userId: user.objectId, action: .signup, installationId: installationId))
        }
        let body: JSONObject = [
            "objectId": .string(user.objectId),
            "createdAt": iso(user.createdAt),
            "sessionToken": .string(session.sessionToken),
        ]
        return AuthResult(body: body, sessionToken: session.sessionToken, userId: user.objectId, sessionId: session.sessionId)
    }

    /// Input keys a client may send but that are never stored as fields.
    static let ignoredInput: Set<String> = ["sessionToken", "authData", "currentPassword"]

    /// The client's fields to store: without `password` and `ignoredInput`; internal names
    /// (a leading `_`, such as `_hashed_password`) are refused with 105, since the store is told
    /// to accept internal fields from this module.
    static func clientFields(_ body: JSONObject) throws(ParseError) -> JSONObject {
        var out = JSONObject()
        for e in body where !ignoredInput.contains(e.key) && e.key != "password" {
            guard !e.key.hasPrefix("_") else { throw ParseError(.invalidKeyName, "invalid field name: \(e.key)") }
            out.entries.append(e)
        }
        return out
    }

    /// The `email` of a body: nil when absent or null; else validated (125).
    static func email(in body: JSONObject) throws(ParseError) -> String? {
        guard let v = body["email"], !v.isNull else { return nil }
        guard let s = v.stringValue, isPlausibleEmail(s) else {
            throw ParseError(.invalidEmailAddress, "Email address format is invalid.")
        }
        return s
    }

    /// A basic shape check: `local@domain.tld`, no spaces or control characters, at most 254 bytes.
    static func isPlausibleEmail(_ s: String) -> Bool {
        let u = Array(s.utf8)
        guard u.count >= 3, u.count <= 254, !u.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else { return false }
        let parts = s.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, parts[0].utf8.count <= 64 else { return false }
        let labels = parts[1].split(separator: ".", omittingEmptySubsequences: false)
        return labels.count >= 2 && labels.allSatisfy { !$0.isEmpty }
    }

    /// Throws 202 / 203 when another user (not `except`) has the username / email.
    func checkAvailable(username: String?, email: String?, except userId: String?) throws(ParseError) {
        if let username, let other = try store.user(username: username), other.objectId != userId {
            throw ParseError(.usernameTaken, "Account already exists for this username.")
        }
        if let email, let other = try store.user(email: email), other.objectId != userId {
            throw ParseError(.emailTaken, "Account already exists for this email address.")
        }
    }

    // MARK: Login

    /// `POST /parse/login` (JSON body) and `GET /parse/login?username=&password=`.
    ///
    /// `username` may hold the username or the email; `email` is accepted instead of `username`.
    /// Throttled per account and per IP (`LoginThrottle`): over the limit → 155 / 429 with
    /// `Retry-After`, checked before the password is looked at. Wrong credentials (unknown user
    /// or wrong password, indistinguishable, same cost) → 101 and a failure counted.
    /// - Returns: the user as they see themself plus `sessionToken`.
    /// - Throws: 200 / 201 for missing fields, 101, 155.
    public func logIn(username: String?, email: String? = nil, password: String?, ip: String,
                      installationId: String? = nil) throws(ParseError) -> AuthResult {
        let user = try authenticate(username: username, email: email, password: password, ip: ip)
        let session = try createSession(userId: user.objectId, action: .login, installationId: installationId)
        var body = try user.json(for: .user(user.objectId))
        body["sessionToken"] = .string(session.sessionToken)
        return AuthResult(body: body, sessionToken: session.sessionToken, userId: user.objectId, sessionId: session.sessionId)
    }

    /// Checks credentials with throttling; returns the user row. Shared by login and OAuth.
    func authenticate(username: String?, email: String?, password: String?, ip: String) throws(ParseError) -> StoredObject {
        guard let login = (username?.isEmpty == false ? username : email), !login.isEmpty else {
            throw ParseError(.usernameMissing, "username/email is required.")
        }
        guard let password, !password.isEmpty else { throw ParseError(.passwordMissing, "password is required.") }
        let ipKey = ip.isEmpty ? nil : "ip:" + ip
        let nameKey = "name:" + login.lowercased()
        try checkThrottle([ipKey, nameKey].compactMap { $0 })
        let user = username?.isEmpty == false ? try userByLogin(login) : try store.user(email: login)
        let accountKey = user.map { "user:" + $0.objectId } ?? nameKey
        if user != nil { try checkThrottle([accountKey]) }
        guard try Self.verify(password, user: user), let user else {
            recordLoginFailure([ipKey, accountKey].compactMap { $0 })
            throw Self.invalidCredentials
        }
        let hadFailures = throttle.window(accountKey) != nil || throttle.window(nameKey) != nil
        throttle.reset(accountKey)
        throttle.reset(nameKey)
        if hadFailures { persistThrottle([accountKey, nameKey]) }
        return user
    }

    /// For Lua's `auth.verifyPassword`: whether `password` is the user's (the hash never leaves).
    /// False for an unknown user. Runs argon2id: call on a worker.
    public func verifyPassword(userId: String, password: String) throws(ParseError) -> Bool {
        let user = try store.fetchRaw("_User", objectId: userId)
        guard let user else { return false }
        return try Self.verify(password, user: user)
    }
}
