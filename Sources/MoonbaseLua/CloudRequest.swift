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
        func folded(_ name: String) -> Bool { !name.utf8.contains { ($0 >= 65 && $0 <= 90) || $0 >= 0x80 } }
        if headers.allSatisfy({ folded($0.0) }) { return headers }
        return headers.map { folded($0.0) ? $0 : ($0.0.lowercased(), $0.1) }
    }

    /// `[req]`, a handler's argument list, as JSON text: `extra`'s members (the handler-specific
    /// ones), then `user`, `master`, `headers` and `ip`, written straight to bytes for the bridge
    /// to decode into Lua in C. Building a JSON value and then encoding it cost about 15,000
    /// instructions of a 190,000-instruction Lua route request. A member written twice (two
    /// headers that differ only in case) keeps its last value: the bridge sets members in order.
    func arguments(_ extra: [(String, JSONValue)]) -> [UInt8] {
        var w = JSONWriter(capacity: 384)
        w.raw("[{")
        for (k, v) in extra {
            w.string(k)
            w.byte(UInt8(ascii: ":"))
            w.write(v)
            w.byte(UInt8(ascii: ","))
        }
        if let user {
            w.raw("\"user\":")
            w.write(user)
            w.byte(UInt8(ascii: ","))
        }
        w.raw(identity.isMaster ? "\"master\":true,\"headers\":{" : "\"master\":false,\"headers\":{")
        for (i, (k, v)) in headers.enumerated() {
            if i > 0 { w.byte(UInt8(ascii: ",")) }
            w.string(k)
            w.byte(UInt8(ascii: ":"))
            w.string(v)
        }
        w.byte(UInt8(ascii: "}"))
        if let ip {
            w.raw(",\"ip\":")
            w.string(ip)
        }
        w.raw("}]")
        return w.bytes
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
