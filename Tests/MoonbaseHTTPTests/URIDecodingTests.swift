import MoonbaseHTTP
import Testing

@Suite("Percent-decoding and request ids")
struct URIDecodingTests {
    @Test(arguments: [
        ("/plain", "/plain"),
        ("/a%20b", "/a b"),
        ("/a+b", "/a+b"),
        ("/caf%C3%A9", "/café"),
        ("/%2Fslash", "//slash"),
        ("/raw-é", "/raw-é"),
    ])
    func pathDecodes(_ raw: String, _ expected: String) {
        #expect(URIDecoding.decodePath(raw) == expected)
    }

    @Test(arguments: ["/%", "/%4", "/%zz", "/%00", "/%FF", "/%C3"])
    func malformedPathIsRejected(_ raw: String) {
        #expect(URIDecoding.decodePath(raw) == nil)
    }

    @Test func queryPairs() throws {
        let q = try #require(URIDecoding.parseQuery("where=%7B%22a%22%3A1%7D&order=-createdAt&x=a+b&flag&&e="))
        #expect(q.map { $0.0 } == ["where", "order", "x", "flag", "e"])
        #expect(q.map { $0.1 } == ["{\"a\":1}", "-createdAt", "a b", "", ""])
        #expect(URIDecoding.parseQuery("")?.isEmpty == true)
        #expect(URIDecoding.parseQuery("a=%G1") == nil)
        #expect(URIDecoding.parseQuery("a=1=2")?.first?.1 == "1=2")
        // Escapes cut short, decoded NULs and bytes that are not UTF-8, in names and values.
        for bad in ["a=%", "a=%4", "a=1&b=%4", "%zz=1", "a=%00", "a=%C3", "a=%C3&b=1", "%=1", "a=\u{0}"] {
            #expect(URIDecoding.parseQuery(bad) == nil, "\(bad)")
        }
        let mixed = try #require(URIDecoding.parseQuery("&&caf%C3%A9=cr%C3%A8me+br%C3%BBl%C3%A9e&=v&k=&raw=é&"))
        #expect(mixed.map { $0.0 } == ["café", "", "k", "raw"])
        #expect(mixed.map { $0.1 } == ["crème brûlée", "v", "", "é"])
    }

    @Test func splitTarget() {
        let (p, q) = URIDecoding.split("/a/b?x=1?y")
        #expect(p == "/a/b" && q == "x=1?y")
        let (p2, q2) = URIDecoding.split("/only")
        #expect(p2 == "/only" && q2 == "")
    }

    @Test func requestIds() {
        #expect(RequestID.isSane("abc-DEF_123"))
        #expect(!RequestID.isSane(""))
        #expect(!RequestID.isSane("a b"))
        #expect(!RequestID.isSane("é"))
        #expect(!RequestID.isSane(String(repeating: "x", count: 65)))
        let a = RequestID.generate(), b = RequestID.generate()
        #expect(a != b && RequestID.isSane(a) && RequestID.isSane(b))
    }

    @Test func requestAccessors() {
        let r = HTTPRequest(method: "GET", path: "/", query: [("a", "1"), ("a", "2")], headers: [("x-k", "v")])
        #expect(r.header("x-k") == "v" && r.header("nope") == nil)
        #expect(r.queryValue("a") == "1" && r.queryValues("a") == ["1", "2"])
    }

    @Test func responseHelpers() {
        let e = HTTPResponse.parseError(status: 400, code: .invalidJSON, message: "bad \"json\"\n")
        #expect(String(decoding: e.body, as: UTF8.self) == "{\"code\":107,\"error\":\"bad \\\"json\\\"\\n\"}")
        #expect(e.header("content-type") == HTTPResponse.jsonContentType)
        let j = HTTPResponse.json(201, Array("{}".utf8), headers: [("Location", "http://x/y")])
        #expect(j.status == 201 && j.header("location") == "http://x/y")
    }
}
