import MoonbaseCore
import MoonbaseJSON

/// Who is calling and from where: the part of `req` every handler gets.
public struct CloudRequest: Sendable {
    public var identity: Identity
    /// The caller's `_User` object (`req.user`), nil when anonymous or master.
    public var user: JSONValue?
    public var requestId: String?
    /// Request headers, names lower-cased (`req.headers`). The HTTP layer already lower-cases
    /// the names it reads (`HTTPRequest.headers`), so for a served request the initialiser only
    /// checks them; a name with an upper-case or non-ASCII letter is lower-cased there, once.
    public private(set) var headers: [(String, String)]
    public var ip: String?

    public init(identity: Identity = .anonymous, user: JSONValue? = nil, requestId: String? = nil,
                headers: [(String, String)] = [], ip: String? = nil) {
        self.identity = identity
        self.user = user
        self.requestId = requestId
        self.headers = Self.lowercasedNames(headers)
        self.ip = ip
    }

    static func lowercasedNames(_ headers: [(String, String)]) -> [(String, String)] {
        // A byte loop over each name's contiguous UTF-8 (`utf8.contains` with a closure cost
        // ~440 instructions a header, 2,600 for an SDK's six).
        func folded(_ name: String) -> Bool {
            var name = name
            return name.withUTF8 { u in
                for c in u where (c >= 65 && c <= 90) || c >= 0x80 { return false }
                return true
            }
        }
        if headers.allSatisfy({ folded($0.0) }) { return headers }
        return headers.map { folded($0.0) ? $0 : ($0.0.lowercased(), $0.1) }
    }

    /// `[req]`, a handler's argument list as the bridge reads it (`LuaArgs`): `extra`'s members
    /// (the handler-specific ones, JSON values), then `user`, `master`, `headers` and `ip`.
    func arguments(_ extra: [(String, JSONValue)]) -> LuaArgs {
        arguments { a in
            for (k, v) in extra {
                a.key(k)
                a.json(v)
            }
        }
    }

    /// The same with the handler-specific members written by `write` (key, value each). A
    /// member written twice (two headers that differ only in case) keeps its last value: the
    /// bridge sets members in order.
    func arguments(_ write: (LuaArgs) -> Void) -> LuaArgs {
        let a = LuaArgs(count: 1)
        a.object {
            write(a)
            if let user {
                a.key("user")
                a.json(user)
            }
            a.key("master")
            a.bool(identity.isMaster)
            a.key("headers")
            a.strings(headers)
            if let ip {
                a.key("ip")
                a.string(ip)
            }
        }
        return a
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
