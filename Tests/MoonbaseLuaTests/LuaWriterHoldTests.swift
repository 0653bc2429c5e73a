import MoonbaseCore
import MoonbaseJSON
import Synchronization
import Testing
@testable import MoonbaseLua

/// A host whose `db.transaction(fn)` holds a (pretend) writer the way the real one does.
final class WriterHost: CloudHostAPI {
    let outcomes = Mutex<[String]>([])

    func call(_ ns: String, _ name: String, _ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> JSONValue {
        guard ns == "db", name == "transaction", let fn = args.first?.function else { return .null }
        do throws(ParseError) {
            let v = try ctx.vm.holdingWriter(.functionDefaults) { () throws(ParseError) -> JSONValue in
                try ctx.vm.call(fn, [])
            }
            outcomes.withLock { $0.append("commit") }
            return v
        } catch {
            outcomes.withLock { $0.append("rollback") }
            throw error
        }
    }
}

/// Lua code running while its thread holds the writer is stopped at the writer hold limit,
/// long before the call's timeout; pcall cannot keep it going; the VM answers afterwards.
@Suite(.timeLimit(.minutes(1))) struct LuaWriterHoldTests {
    static let source = """
    cloud.define('spinTx', function() db.transaction(function() while true do end end) end)
    cloud.define('spinTxCaught', function()
      while true do pcall(db.transaction, function() while true do end end) end
    end)
    cloud.define('quickTx', function() return db.transaction(function() return 'done' end) end)
    cloud.define('spinOutside', function() while true do end end)
    cloud.define('ok', function() return 'still here' end)
    cloud.beforeSave('Post', function(req) while true do end end)
    """

    func limits(holdMs: Int64) -> LuaLimits {
        LuaLimits(timeoutMs: 10_000, maxMemoryMB: 64, maxDbOps: 100, writerHoldMs: holdMs)
    }

    @Test func spinningTransactionStopsAtTheHoldLimit() throws {
        let host = WriterHost()
        let vm = try makeVM(Self.source, file: "functions/tx.lua", host: host)
        for name in ["spinTx", "spinTxCaught"] {
            let clock = ContinuousClock()
            let t0 = clock.now
            let e = failure { try vm.runFunction(name, params: [:], request: CloudRequest(), limits: limits(holdMs: 200)) }
            let elapsed = clock.now - t0
            #expect(e?.code == .scriptFailed)
            #expect(e?.message.hasPrefix("writer hold limit of 200 ms exceeded in function '\(name)' (functions/tx.lua:") == true,
                    "\(e?.message ?? "no error")")
            #expect(elapsed < .seconds(5), "\(elapsed)")
            #expect(host.outcomes.withLock { $0.last } == "rollback")
            #expect(try vm.runFunction("ok", params: [:], request: CloudRequest()) == "still here")
        }
        #expect(try vm.runFunction("quickTx", params: [:], request: CloudRequest(), limits: limits(holdMs: 200)) == "done")
        #expect(host.outcomes.withLock { $0.last } == "commit")
    }

    @Test func holdLimitIsDistinctFromTheTimeout() throws {
        let vm = try makeVM(Self.source, host: WriterHost())
        // Outside a transaction only the timeout applies.
        let e = failure {
            try vm.runFunction("spinOutside", params: [:], request: CloudRequest(),
                               limits: LuaLimits(timeoutMs: 300, maxMemoryMB: 64, maxDbOps: 100, writerHoldMs: 100))
        }
        #expect(e?.message.hasPrefix("timeout of 300 ms exceeded") == true, "\(e?.message ?? "")")
        // 0 switches the hold limit off: the timeout ends the transaction instead.
        let f = failure {
            try vm.runFunction("spinTx", params: [:], request: CloudRequest(),
                               limits: LuaLimits(timeoutMs: 300, maxMemoryMB: 64, maxDbOps: 100, writerHoldMs: 0))
        }
        #expect(f?.message.hasPrefix("timeout of 300 ms exceeded") == true, "\(f?.message ?? "")")
    }

    @Test func triggerFiredUnderTheWriterStopsAtTheHoldLimit() throws {
        let vm = try makeVM(Self.source, host: WriterHost())
        // A REST write: the writer is taken before any Lua call is running.
        let e = failure {
            try vm.holdingWriter(limits(holdMs: 150)) { () throws(ParseError) -> JSONValue? in
                try vm.runTrigger(.beforeSave, className: "Post", object: ["a": 1], request: CloudRequest(),
                                  limits: limits(holdMs: 150))
            }
        }
        #expect(e?.message.hasPrefix("writer hold limit of 150 ms exceeded in function 'beforeSave Post'") == true,
                "\(e?.message ?? "")")
        #expect(try vm.runFunction("ok", params: [:], request: CloudRequest()) == "still here")
    }

    @Test func optionAndDefaults() throws {
        let vm = try makeVM("cloud.define('f', {writerHoldMs = 50}, function() end)")
        #expect(vm.registry.functions["f"]?.options.writerHoldMs == 50)
        #expect(LuaLimits.functionDefaults.applying(vm.registry.functions["f"]!.options).writerHoldMs == 50)
        #expect(LuaLimits.functionDefaults.writerHoldMs == 2_000 && LuaLimits.jobDefaults.writerHoldMs == 30_000)
    }
}
