import MoonbaseCore
import MoonbaseJSON
import Testing
@testable import MoonbaseLua

/// Tripped limits end the call with 141 naming the limit and file:line; `pcall` cannot catch
/// them; the VM answers the next call.
@Suite(.timeLimit(.minutes(1))) struct LuaLimitsTests {
    static let source = """
    local function spin()
      while true do end
    end
    cloud.define('spin', function() spin() end)
    cloud.define('pcallspin', function() while true do pcall(function() while true do end end) end end)
    cloud.define('xpcallspin', function() return xpcall(function() while true do end end, function(e) while true do end end) end)
    cloud.define('bomb', function() local t = {} for i = 1, 1e9 do t[i] = i end end)
    cloud.define('pcallbomb', function() local ok = pcall(function() local t = {} for i = 1, 1e9 do t[i] = i end end) return ok end)
    cloud.define('rep', function() return #string.rep('x', 1e8) end)
    cloud.define('repcat', function() local s = 'x' for i = 1, 40 do s = s .. s end return #s end)
    cloud.define('count', function() local n = 0 for i = 1, 1e7 do n = n + i end return n end)
    cloud.define('dbloop', function() for i = 1, 100 do pcall(db.count, 'Post') end end)
    cloud.define('closewait', function() local x <close> = setmetatable({}, {__close = function() while true do end end}) while true do end end)
    cloud.define('ok', function() return 'still here' end)
    """

    func expectKill(_ vm: LuaVM, _ name: String, _ limits: LuaLimits, contains: String) {
        let e = failure { try vm.runFunction(name, params: [:], request: CloudRequest(), limits: limits) }
        #expect(e?.code == .scriptFailed, "\(name): \(String(describing: e))")
        #expect(e?.message.contains(contains) == true, "\(name): \(e?.message ?? "no error")")
        #expect(e?.message.contains("in function '\(name)'") == true, "\(name): \(e?.message ?? "")")
        #expect((try? vm.runFunction("ok", params: [:], request: CloudRequest())) == "still here")
        #expect(vm.stackTop == 0)
    }

    @Test func timeoutNamesLimitAndLine() throws {
        let vm = try makeVM(Self.source, file: "functions/a.lua")
        let e = failure { try vm.runFunction("spin", params: [:], request: CloudRequest(), limits: .quick(timeoutMs: 100)) }
        #expect(e?.message == "timeout of 100 ms exceeded in function 'spin' (functions/a.lua:2)")
        #expect(try vm.runFunction("ok", params: [:], request: CloudRequest()) == "still here")
    }

    @Test func timeoutCannotBeCaught() throws {
        let vm = try makeVM(Self.source)
        expectKill(vm, "pcallspin", .quick(timeoutMs: 100), contains: "timeout of 100 ms")
        expectKill(vm, "xpcallspin", .quick(timeoutMs: 100), contains: "timeout of 100 ms")
        expectKill(vm, "closewait", .quick(timeoutMs: 100), contains: "timeout of 100 ms")
    }

    @Test func memoryLimit() throws {
        let vm = try makeVM(Self.source)
        let before = vm.memoryInUse
        expectKill(vm, "bomb", .quick(memoryMB: 16), contains: "memory limit of 16 MB exceeded")
        expectKill(vm, "pcallbomb", .quick(memoryMB: 16), contains: "memory limit of 16 MB exceeded")
        expectKill(vm, "rep", .quick(memoryMB: 16), contains: "memory limit")
        expectKill(vm, "repcat", .quick(memoryMB: 16), contains: "memory limit")
        #expect(vm.memoryInUse < before + 1 << 20)
    }

    @Test func instructionLimit() throws {
        let vm = try makeVM(Self.source)
        expectKill(vm, "count", .quick(instructions: 100_000), contains: "instruction limit of 100000 exceeded")
        // Without a budget the same loop finishes.
        #expect(try vm.runFunction("count", params: [:], request: CloudRequest()) == .int(50_000_005_000_000))
    }

    @Test func dbOpsLimitCannotBeCaught() throws {
        let vm = try makeVM(Self.source)
        expectKill(vm, "dbloop", .quick(dbOps: 10), contains: "database operation limit of 10 exceeded")
    }

    @Test func optionsOverrideLimits() throws {
        let vm = try makeVM("cloud.define('s', {timeoutMs = 50}, function() while true do end end)")
        let e = failure { try vm.runFunction("s", params: [:], request: CloudRequest()) }
        #expect(e?.message.hasPrefix("timeout of 50 ms exceeded") == true)
    }
}
