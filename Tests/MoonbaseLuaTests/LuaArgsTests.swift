import MoonbaseCore
import MoonbaseJSON
import Testing
@testable import MoonbaseLua

/// A call's arguments reach Lua through the argument tape (`LuaArgs`, read by lb_call.c).
@Suite(.timeLimit(.minutes(1))) struct LuaArgsTests {
    /// Each kind of tape value as Lua sees it: raw body bytes (a NUL, a byte that is not UTF-8),
    /// a JSON body beside them, path parameters, a query name given twice (the last value
    /// wins), an empty table, booleans.
    @Test func routeRequestMembers() throws {
        let vm = try makeVM("""
        cloud.route("POST", "/t/:a/:b", function(req)
          local qn = 0
          for _ in pairs(req.query) do qn = qn + 1 end
          return {json = {len = #req.body, b1 = req.body:byte(1), b2 = req.body:byte(2), b3 = req.body:byte(3),
                          a = req.path.a, b = req.path.b, q = req.query.q, qn = qn, json = req.json == nil,
                          master = req.master, headers = next(req.headers) == nil}}
        end)
        cloud.route("POST", "/j", function(req) return {json = {j = req.json, body = req.body}} end)
        """)
        let r = try #require(try vm.runRoute(CloudRouteRequest(method: "POST", path: "/t/x/é",
                                                               query: [("q", "1"), ("q", "2")], body: [0x61, 0x00, 0xFF])))
        #expect(try JSON.parse(r.body) == ["len": 3, "b1": 0x61, "b2": 0, "b3": 255, "a": "x", "b": "é",
                                           "q": "2", "qn": 1, "json": true, "master": false, "headers": true])
        let j = try #require(try vm.runRoute(CloudRouteRequest(method: "POST", path: "/j", body: Array(#"{"k":[1,2.5,null,"é"]}"#.utf8))))
        #expect(try JSON.parse(j.body) == ["j": ["k": [1, 2.5, .null, "é"]], "body": #"{"k":[1,2.5,null,"é"]}"#])
    }

    /// A tape the bridge cannot read raises a Lua error: no crash, no call of the handler.
    @Test(arguments: [
        [1, 0, 0],                                   // a short count
        [1, 0, 0, 0],                                // one value announced, none written
        [1, 0, 0, 0, UInt8(ascii: "S"), 9, 0, 0, 0, 0x61],   // a string longer than the tape
        [1, 0, 0, 0, UInt8(ascii: "O"), 1, 0, 0, 0],         // a table member missing
        [1, 0, 0, 0, UInt8(ascii: "J"), 1, 0, 0, 0, UInt8(ascii: "{")],   // bad JSON
        [1, 0, 0, 0, UInt8(ascii: "X")],             // an unknown tag
        [1, 0, 0, 0, UInt8(ascii: "T"), UInt8(ascii: "T")],  // bytes after the last value
        [201, 0, 0, 0],                              // too many arguments
    ] as [[UInt8]])
    func malformedTapesAreRefused(_ raw: [UInt8]) throws {
        let vm = try makeVM("""
        ran = 0
        cloud.define("f", function(req) ran = ran + 1 return ran end)
        """)
        let ref = try #require(vm.handlerRefs[.function("f")])
        let ctx = vm.makeContext(identity: .anonymous, user: nil, requestId: nil, name: "f", limits: .functionDefaults)
        let e = failure { try vm.invoke(ref: ref, args: LuaArgs(unchecked: raw), mode: .returnValue, context: ctx) }
        let message = try #require(e).message
        #expect(message.contains("malformed call arguments") || message.contains("too many arguments")
                || message.contains("invalid JSON"))
        // The VM still answers, and the handler ran only for the well-formed call.
        #expect(try vm.runFunction("f", params: [:], request: CloudRequest()) == 1)
    }
}
