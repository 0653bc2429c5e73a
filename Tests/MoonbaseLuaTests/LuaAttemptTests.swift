import MoonbaseCore
import MoonbaseJSON
import Testing
@testable import MoonbaseLua

/// Attempts (`LuaVM.attemptNanos`): a call started under a short budget either finishes, or
/// suspends itself (budget spent, or a host function that may block) and is resumed by the next
/// outermost call of the same handler on the VM — once, never re-run from the start.
@Suite(.timeLimit(.minutes(1))) struct LuaAttemptTests {
    static let source = """
    local n = 0
    cloud.define('quick', function(req) n = n + 1 return {n = n, now = type(time.now())} end)
    cloud.define('long', function(req)
      n = n + 1
      local s = 0
      for i = 1, 3000000 do s = s + i end
      return {n = n, s = s}
    end)
    cloud.define('write', function(req)
      n = n + 1
      local o = db.create('Thing', {n = n})
      return {n = n, id = o.objectId, count = db.count('Thing')}
    end)
    cloud.define('inPcall', function(req)
      n = n + 1
      local ok, c = pcall(db.count, 'Thing')
      return {n = n, ok = ok, c = c}
    end)
    cloud.define('failsLater', function(req)
      db.count('Thing')
      error(cloud.error(142, 'nope'))
    end)
    cloud.define('spinLater', function(req)
      db.count('Thing')
      while true do end
    end)
    cloud.define('instructions', function(req) while true do end end)
    cloud.define('ok', function() return 'still here' end)
    """

    func call(_ vm: LuaVM, _ name: String, attempt: Bool, limits: LuaLimits = .functionDefaults) throws(ParseError) -> JSONValue {
        if attempt { vm.attemptNanos = 1_000_000 }
        return try vm.runFunction(name, params: [:], request: CloudRequest(), limits: limits)
    }

    /// Attempts `name`; if it suspends, resumes it as the worker would. Returns (result, suspended).
    func attemptThenFinish(_ vm: LuaVM, _ name: String, limits: LuaLimits = .functionDefaults) throws(ParseError) -> (JSONValue, Bool) {
        do {
            return (try call(vm, name, attempt: true, limits: limits), false)
        } catch where LuaVM.isContinuesOnWorker(error) {
            #expect(vm.hasPending)
            return (try call(vm, name, attempt: false, limits: limits), true)
        }
    }

    @Test func quickCallFinishesWithinTheAttempt() throws {
        let vm = try makeVM(Self.source)
        let (v, suspended) = try attemptThenFinish(vm, "quick")
        #expect(!suspended)
        #expect(v == ["n": 1, "now": "number"])
        #expect(!vm.hasPending && vm.stackTop == 0)
    }

    @Test func longCallSuspendsAndResumesOnce() throws {
        let vm = try makeVM(Self.source)
        let (v, suspended) = try attemptThenFinish(vm, "long")
        #expect(suspended)
        // Module state changed once: the call continued, it was not started again.
        #expect(v == ["n": 1, "s": .int(4_500_001_500_000)])
        #expect(try call(vm, "quick", attempt: false) == ["n": 2, "now": "number"])
        #expect(!vm.hasPending && vm.stackTop == 0)
    }

    @Test func hostCallSuspendsBeforeItRuns() throws {
        let host = FakeHost()
        let vm = try makeVM(Self.source, host: host)
        #expect(throws: ParseError.self) { try call(vm, "write", attempt: true) }
        #expect(vm.hasPending)
        #expect(host.calls.withLock { $0 }.isEmpty)
        let v = try call(vm, "write", attempt: false)
        #expect(v == ["n": 1, "id": "new1", "count": 42])
        #expect(host.calls.withLock { $0 } == ["db.create", "db.count"])
        // Inside pcall too (our pcall lets the call yield).
        let (p, suspended) = try attemptThenFinish(vm, "inPcall")
        #expect(suspended && p == ["n": 2, "ok": true, "c": 42])
    }

    @Test func errorsAndLimitsAfterResumeAnswerAsBefore() throws {
        let vm = try makeVM(Self.source, file: "functions/a.lua")
        let e = failure { try attemptThenFinish(vm, "failsLater") }
        #expect(e?.code == .validationError && e?.message == "nope")
        let spin = failure { try attemptThenFinish(vm, "spinLater", limits: .quick(timeoutMs: 100)) }
        #expect(spin?.message == "timeout of 100 ms exceeded in function 'spinLater' (functions/a.lua:25)")
        var l = LuaLimits.functionDefaults
        l.maxInstructions = 10_000
        let ins = failure { try call(vm, "instructions", attempt: true, limits: l) }
        #expect(ins?.message.hasPrefix("instruction limit of 10000 exceeded in function 'instructions'") == true)
        #expect(try call(vm, "ok", attempt: true) == "still here")
        #expect(!vm.hasPending && vm.stackTop == 0)
    }

    @Test func anotherCallDropsTheSuspendedOne() throws {
        let host = FakeHost()
        let vm = try makeVM(Self.source, host: host)
        #expect(throws: ParseError.self) { try call(vm, "write", attempt: true) }
        #expect(vm.hasPending)
        #expect(try call(vm, "quick", attempt: false) == ["n": 2, "now": "number"])
        #expect(!vm.hasPending && vm.stackTop == 0)
        #expect(host.calls.withLock { $0 }.isEmpty)
        vm.attemptNanos = 1_000_000
        #expect(throws: ParseError.self) { try vm.runFunction("write", params: [:], request: CloudRequest()) }
        vm.discardPending()
        #expect(!vm.hasPending && vm.stackTop == 0)
        #expect(try call(vm, "ok", attempt: false) == "still here")
    }

    @Test func otherLuaWorkFirstDropsTheSuspendedCall() throws {
        let host = FakeHost()
        let vm = try makeVM(Self.source, host: host)
        #expect(throws: ParseError.self) { try call(vm, "write", attempt: true) }
        #expect(vm.hasPending)
        // Loading a file runs Lua on the VM: the suspended call is dropped first.
        try vm.load(file: "functions/b.lua", source: "local x = 1")
        #expect(!vm.hasPending)
        // The same handler then runs from its start; what the dropped call did before it
        // yielded stays, as for any call stopped midway (the counter is 2).
        #expect(try call(vm, "write", attempt: false) == ["n": 2, "id": "new1", "count": 42])
        #expect(host.calls.withLock { $0 } == ["db.create", "db.count"])
        #expect(vm.stackTop == 0)
    }
}
