import MoonbaseHTTP

/// Cross-origin rules for browsers (the Parse JavaScript SDK, web apps): which origins may read
/// the API's answers, and the preflight answer.
///
/// The rule is by path: every path gets CORS headers except those under `excludedPrefixes`
/// (the dashboard, which must never be readable from another origin). Headers are added only
/// when the request carries an `Origin` header (browsers always send one cross-origin), so other
/// clients pay nothing.
public struct CORSPolicy: Sendable {
    /// Allowed origins (`https://app.example.com`), or `["*"]` for any; empty = CORS off.
    public var origins: [String]

    public static let excludedPrefixes = ["/dashboard"]
    /// The same with a trailing slash, built once: `applies` runs on every request.
    private static let excludedFolders = excludedPrefixes.map { $0 + "/" }
    public static let allowMethods = "GET, POST, PUT, DELETE, OPTIONS"
    public static let allowHeaders = "X-Parse-Master-Key, X-Parse-REST-API-Key, X-Parse-Javascript-Key, "
        + "X-Parse-Application-Id, X-Parse-Client-Version, X-Parse-Session-Token, X-Requested-With, "
        + "X-Parse-Revocable-Session, X-Parse-Request-Id, X-Parse-Installation-Id, X-Request-Id, "
        + "Content-Type, Pragma, Cache-Control, Authorization"
    public static let exposeHeaders = "X-Parse-Job-Status-Id, X-Parse-Push-Status-Id, RateLimit-Limit, "
        + "RateLimit-Remaining, RateLimit-Reset, Retry-After, X-Request-Id, Location"

    public init(origins: [String]) { self.origins = origins }

    /// Parses `--cors-origins` / `MOONBASE_CORS_ORIGINS`: a comma list, `*`, or `none`.
    public static func parse(_ text: String) -> [String] {
        let items = text.split(separator: ",").map { String($0).trimmingWhitespace() }.filter { !$0.isEmpty }
        if items == ["none"] { return [] }
        return items.contains("*") ? ["*"] : items
    }

    public func applies(_ path: String) -> Bool {
        !origins.isEmpty && !CORSPolicy.excludedPrefixes.contains(path)
            && !CORSPolicy.excludedFolders.contains { path.hasPrefix($0) }
    }

    /// The `Access-Control-Allow-Origin` value for `origin`, or nil when it is not allowed.
    func allowOrigin(_ origin: String) -> String? {
        if origins == ["*"] { return "*" }
        return origins.contains(origin) ? origin : nil
    }

    /// The headers every answer to a cross-origin request carries.
    func headers(_ request: HTTPRequest) -> [(String, String)] {
        guard applies(request.path), let origin = request.header("origin"), let allow = allowOrigin(origin) else {
            return []
        }
        var h = [("Access-Control-Allow-Origin", allow), ("Access-Control-Expose-Headers", CORSPolicy.exposeHeaders)]
        if allow != "*" { h.append(("Vary", "Origin")) }
        return h
    }

    /// The answer to a preflight `OPTIONS` (200, empty): methods and headers the browser may use.
    func preflight(_ request: HTTPRequest) -> HTTPResponse {
        var h: [(String, String)] = [("Content-Type", "text/plain; charset=utf-8")]
        if let origin = request.header("origin"), let allow = allowOrigin(origin) {
            h.append(("Access-Control-Allow-Origin", allow))
            h.append(("Access-Control-Allow-Methods", CORSPolicy.allowMethods))
            h.append(("Access-Control-Allow-Headers", CORSPolicy.allowHeaders))
            h.append(("Access-Control-Max-Age", "600"))
            if allow != "*" { h.append(("Vary", "Origin")) }
        }
        return HTTPResponse(status: 200, headers: h, body: [])
    }
}
