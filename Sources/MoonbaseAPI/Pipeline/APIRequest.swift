import MoonbaseCore
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseQuota
import MoonbaseStore

/// One API request as endpoints see it: the HTTP request, the route's captures, and who calls.
///
/// Thread-confined: built and used on the worker (or I/O thread) that answers the request.
public final class APIRequest {
    public let http: HTTPRequest
    public let params: [(String, String)]
    /// The route pattern that matched (`/parse/classes/:className`).
    public let pattern: String
    public internal(set) var identity: Identity = .anonymous
    /// The caller's `_User` object (as the user sees themself), when a session was given.
    public internal(set) var user: JSONObject?
    /// The session token as given (for logout); never logged.
    public internal(set) var sessionToken: String?
    /// What the request is attributed to in the usage report.
    public var target: UsageTarget?
    /// Database operations and Lua CPU spent, for accounting.
    public let meter = RequestMeter()
    /// Response headers endpoints add (RateLimit-*, X-Parse-Job-Status-Id…).
    public var extraHeaders: [(String, String)] = []

    init(http: HTTPRequest, params: [(String, String)], pattern: String) {
        self.http = http
        self.params = params
        self.pattern = pattern
    }

    public var isMaster: Bool { identity.isMaster }
    public var requestId: String { http.requestId }

    public func param(_ name: String) -> String {
        for (k, v) in params where k == name { return v }
        return ""
    }

    /// The JSON body, or 107 when it is not a JSON object (an empty body is `{}`).
    public func jsonBody() throws(ParseError) -> JSONObject { try Self.jsonObject(http.body) }

    /// `body` read as `jsonBody` reads a request's (also at dispatch, before an `APIRequest`).
    static func jsonObject(_ body: [UInt8]) throws(ParseError) -> JSONObject {
        if body.isEmpty { return JSONObject() }
        let v = try JSON.parse(body)
        guard case .object(let o) = v else { throw ParseError(.invalidJSON, "request body must be a JSON object") }
        return o
    }

    /// The caller's user id, if logged in.
    public var userId: String? { identity.userId ?? user?["objectId"]?.stringValue }
}
