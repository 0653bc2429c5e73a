import MoonbaseCore
import MoonbaseJSON
import Testing
@testable import MoonbaseLua

@Suite(.timeLimit(.minutes(1))) struct LuaBasicsTests {
    @Test func helloReturnsValue() throws {
        #expect(try run("return 'hello'") == "hello")
        #expect(try run("return 1 + 2") == .int(3))
        #expect(try run("return 1.5") == .double(1.5))
        #expect(try run("return {a = 1, b = {true, false}}") == ["a": 1, "b": [true, false]])
        #expect(try run("return nil") == .null)
    }

    @Test func paramsArrive() throws {
        #expect(try run("return req.params.x * 2", params: ["x": 21]) == .int(42))
        #expect(try run("return req.master") == false)
    }

    @Test func unknownFunction() throws {
        let vm = try makeVM("")
        let e = failure { try vm.runFunction("nope", params: [:], request: CloudRequest()) }
        #expect(e?.code == .scriptFailed)
        #expect(e?.message == "Invalid function: \"nope\"")
    }

    @Test func stackStaysBalanced() throws {
        let vm = try makeVM("cloud.define('t', function(req) return {1,2,3} end)\ncloud.define('e', function() error('x') end)")
        for _ in 0..<100 {
            _ = try vm.runFunction("t", params: [:], request: CloudRequest())
            _ = failure { try vm.runFunction("e", params: [:], request: CloudRequest()) }
        }
        #expect(vm.stackTop == 0)
        #expect(vm.depth == 0)
    }
}
