import MoonbaseCore
import MoonbaseJSON

/// Who is calling and from where: the part of `req` every handler gets.
public struct CloudRequest: Sendable {
    public var identity: Identity
    /// The caller's `_User` object (`req.user`), nil when anonymous or master.
    public var user: JSONValue?
    public var requestId: String?
    public var headers: [(String, String)]
    public var ip: String?

    public init(identity: Identity = .anonymous, user: JSONValue? = nil, requestId: String? = nil,
                headers: [(String, String)] = [], ip: String? = nil) {
        self.identity = identity
        self.user = user
        self.requestId = requestId
        self.headers = headers
        self.ip = ip
    }

    /// `req` with `user`, `master`, `headers`, `ip` (plus the handler-specific members).
    func table(_ extra: [(String, JSONValue)]) -> JSONValue {
        var o = JSONObject()
        for (k, v) in extra { o[k] = v }
        if let user { o["user"] = user }
        o["master"] = .bool(identity.isMaster)
        var h = JSONObject()
        for (k, v) in headers { h[k.lowercased()] = .string(v) }
        o["headers"] = .object(h)
        if let ip { o["ip"] = .string(ip) }
        return .object(o)
    }
}

/// A route invocation's request (`req.path`, `req.query`, `req.body`, `req.json`).
public struct CloudRouteRequest: Sendable {
    public var method: String
    public var path: String
    public var query: [(String, String)]
    public var body: [UInt8]
    public var request: CloudRequest
    /// The route the host already matched (declared method, pattern, path parameters): the VM
    /// then runs that handler without matching the path again. nil: the VM matches.
    public var matched: (method: String, pattern: String, params: [(String, String)])?
    public init(method: String, path: String, query: [(String, String)] = [], body: [UInt8] = [],
                request: CloudRequest = CloudRequest()) {
        self.method = method
        self.path = path
        self.query = query
        self.body = body
        self.request = request
    }
}

/// What a route answered: `{status, json | body, headers}`.
public struct CloudRouteResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]
    public init(status: Int, headers: [(String, String)], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}
