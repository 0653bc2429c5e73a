import MoonbaseCore
import MoonbaseJSON
import Testing
@testable import MoonbaseLua

/// The VM memory cap counts module state; the JSON scratch buffer counts as VM memory; a call's
/// result is capped before the host copies it.
@Suite(.timeLimit(.minutes(1))) struct LuaVMMemoryTests {
    static let source = """
    local hoard = {}
    cloud.define('grow', function() hoard[#hoard + 1] = string.rep('x', 4 << 20) .. #hoard return #hoard end)
    cloud.define('numbers', function(req) local t = {} for i = 1, req.params.n do t[i] = i * 1000 end return t end)
    cloud.define('encodeBig', function() local s = string.rep('a', 3 << 20) return #json.encode({s}) end)
    cloud.define('ok', function() return 'still here' end)
    """

    func limits(memoryMB: Int64 = 64, vmMB: Int64 = 0, resultMB: Int64 = 0) -> LuaLimits {
        LuaLimits(timeoutMs: 10_000, maxMemoryMB: memoryMB, maxDbOps: 100, maxVMMemoryMB: vmMB, maxResultMB: resultMB)
    }

    @Test func moduleStateIsCappedByTheVMLimit() throws {
        let vm = try makeVM(Self.source)
        var lastOK: JSONValue = .null
        var stop: ParseError?
        for _ in 0..<20 {
            do {
                lastOK = try vm.runFunction("grow", params: [:], request: CloudRequest(), limits: limits(vmMB: 32))
            } catch {
                stop = error
                break
            }
        }
        // Each call alone is far under its 64 MB; together they reach the 32 MB VM cap.
        #expect(stop?.code == .scriptFailed)
        #expect(stop?.message.hasPrefix("VM memory limit of 32 MB (module state included) exceeded in function 'grow'") == true,
                "\(stop?.message ?? "no error")")
        #expect((lastOK.intValue ?? 0) >= 5, "\(lastOK)")
        #expect(vm.overVMMemoryLimit)
        #expect(vm.memoryInUse <= 32 << 20)
        // Under its own per-call limit alone the same growth trips the call limit instead.
        let fresh = try makeVM(Self.source)
        let e = failure { try fresh.runFunction("numbers", params: ["n": 10_000_000], request: CloudRequest(), limits: limits(memoryMB: 8, vmMB: 96)) }
        #expect(e?.message.hasPrefix("memory limit of 8 MB exceeded") == true, "\(e?.message ?? "")")
        #expect(!fresh.overVMMemoryLimit)
    }

    @Test func largeResultsStopAtTheResponseCap() throws {
        let vm = try makeVM(Self.source)
        let before = vm.memoryInUse
        let e = failure {
            try vm.runFunction("numbers", params: ["n": 1_000_000], request: CloudRequest(), limits: limits(resultMB: 4))
        }
        #expect(e?.message.hasPrefix("response size limit of 4 MB exceeded in function 'numbers'") == true, "\(e?.message ?? "")")
        // Under the cap the same result is returned whole, and the scratch buffer is released.
        let v = try vm.runFunction("numbers", params: ["n": 200_000], request: CloudRequest(), limits: limits(resultMB: 4))
        #expect(v.arrayValue?.count == 200_000 && v.arrayValue?.last == .int(200_000_000))
        #expect(vm.memoryInUse < before + (1 << 20), "\(vm.memoryInUse - before) bytes kept")
        #expect(try vm.runFunction("ok", params: [:], request: CloudRequest()) == "still here")
    }

    @Test func jsonScratchCountsAgainstTheCallLimit() throws {
        let vm = try makeVM(Self.source)
        // 3 MB string + its 3 MB encoding fit in 7 MB; the 4 MB scratch buffer besides does not.
        let e = failure { try vm.runFunction("encodeBig", params: [:], request: CloudRequest(), limits: limits(memoryMB: 7)) }
        #expect(e?.message.hasPrefix("memory limit of 7 MB exceeded") == true, "\(e?.message ?? "")")
        #expect(try vm.runFunction("encodeBig", params: [:], request: CloudRequest(), limits: limits(memoryMB: 16)) == .int((3 << 20) + 4))
    }

    @Test func defaults() {
        #expect(LuaLimits.functionDefaults.maxVMMemoryBytes == 96 << 20 && LuaLimits.functionDefaults.maxResultBytes == 16 << 20)
        #expect(LuaLimits.jobDefaults.maxVMMemoryBytes == 0)
    }
}
