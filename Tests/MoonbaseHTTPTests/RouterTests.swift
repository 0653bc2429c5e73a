import MoonbaseHTTP
import Testing

@Suite("Router")
struct RouterTests {
    static func parseRouter() throws -> Router<String> {
        var r = Router<String>()
        try r.add("GET", "/parse/health", "health")
        try r.add("GET", "/parse/classes/:className", "find")
        try r.add("POST", "/parse/classes/:className", "create")
        try r.add("GET", "/parse/classes/:className/:objectId", "get")
        try r.add("PUT", "/parse/classes/:className/:objectId", "update")
        try r.add("DELETE", "/parse/classes/:className/:objectId", "delete")
        try r.add("GET", "/parse/users/me", "me")
        try r.add("GET", "/parse/users/:objectId", "user")
        try r.add("GET", "/parse/files/:app/:name", "fileGet")
        try r.add("POST", "/parse/functions/:name", "function")
        try r.add("GET", "/static/*", "static")
        try r.add("*", "/any/:x", "any")
        try r.add("GET", "/a/:p/c", "apc")
        try r.add("GET", "/a/b/d", "abd")
        return r
    }

    struct Case: Sendable, CustomStringConvertible {
        let method: String, path: String
        let value: String?
        let params: [String]
        let wildcard: String?
        init(_ method: String, _ path: String, _ value: String?, _ params: [String] = [], wildcard: String? = nil) {
            self.method = method
            self.path = path
            self.value = value
            self.params = params
            self.wildcard = wildcard
        }
        var description: String { "\(method) \(path)" }
    }

    static let cases: [Case] = [
        Case("GET", "/parse/health", "health"),
        Case("GET", "/parse/health/", "health"),
        Case("GET", "//parse//health", "health"),
        Case("GET", "/parse/classes/Post", "find", ["className=Post"]),
        Case("POST", "/parse/classes/Post", "create", ["className=Post"]),
        Case("GET", "/parse/classes/Post/abc123", "get", ["className=Post", "objectId=abc123"]),
        Case("PUT", "/parse/classes/Post/abc123", "update", ["className=Post", "objectId=abc123"]),
        Case("DELETE", "/parse/classes/Post/x", "delete", ["className=Post", "objectId=x"]),
        Case("PATCH", "/parse/classes/Post/x", nil),
        Case("GET", "/parse/classes/Post/x/extra", nil),
        Case("GET", "/parse/classes", nil),
        Case("GET", "/parse/users/me", "me"),  // literal beats parameter
        Case("GET", "/parse/users/u1", "user", ["objectId=u1"]),
        Case("HEAD", "/parse/users/u1", "user", ["objectId=u1"]),  // HEAD falls back to GET
        Case("GET", "/parse/files/app1/pic.png", "fileGet", ["app=app1", "name=pic.png"]),
        Case("POST", "/parse/functions/hello", "function", ["name=hello"]),
        Case("GET", "/static/css/site.css", "static", wildcard: "css/site.css"),
        Case("GET", "/static", "static", wildcard: ""),
        Case("POST", "/static/x", nil),
        Case("PATCH", "/any/1", "any", ["x=1"]),
        Case("get", "/parse/health", "health"),  // methods are case-insensitive
        // Backtracking: /a/b/c has no literal c under /a/b, so the parameter branch wins.
        Case("GET", "/a/b/c", "apc", ["p=b"]),
        Case("GET", "/a/b/d", "abd"),
        Case("GET", "/", nil),
        Case("GET", "/nope", nil),
    ]

    @Test(arguments: cases)
    func lookup(_ c: Case) throws {
        let r = try RouterTests.parseRouter()
        let m = r.match(method: c.method, path: c.path)
        #expect(m?.value == c.value)
        if let m {
            #expect(m.params.map { "\($0.0)=\($0.1)" } == c.params)
            #expect(m.wildcard == c.wildcard)
        }
    }

    @Test func paramAccessorAndPattern() throws {
        let m = try #require(try RouterTests.parseRouter().match(method: "GET", path: "/parse/classes/Post/42"))
        #expect(m.param("objectId") == "42")
        #expect(m.param("nope") == nil)
        #expect(m.pattern == "/parse/classes/:className/:objectId")
    }

    @Test func allowedMethodsTellsMethodNotAllowedFromNotFound() throws {
        let r = try RouterTests.parseRouter()
        #expect(r.allowedMethods(path: "/parse/classes/Post/x") == ["DELETE", "GET", "PUT"])
        #expect(r.allowedMethods(path: "/parse/nothing") == [])
    }

    @Test func rootRouteAndRegistrationErrors() throws {
        var r = Router<Int>()
        try r.add("GET", "/", 1)
        #expect(r.match(method: "GET", path: "/")?.value == 1)
        #expect(throws: RouterError.self) { try r.add("GET", "/", 2) }
        #expect(throws: RouterError.self) { try r.add("GET", "no-slash", 2) }
        #expect(throws: RouterError.self) { try r.add("GET", "/a/*/b", 2) }
        #expect(throws: RouterError.self) { try r.add("GET", "/a/:", 2) }
        #expect(throws: RouterError.self) { try r.add("GET", "/a/:x/:x", 2) }
        #expect(throws: RouterError.self) { try r.add("", "/a", 2) }
        #expect(r.count == 1)
    }

    @Test func routersAreIndependentValues() throws {
        var a = Router<String>()
        try a.add("GET", "/hello", "v1")
        var b = a  // a reload builds a new value; the old one keeps serving unchanged
        try b.add("GET", "/bye", "v2")
        #expect(a.match(method: "GET", path: "/bye") == nil)
        #expect(b.match(method: "GET", path: "/bye")?.value == "v2")
        #expect(a.count == 1 && b.count == 2)
    }
}
