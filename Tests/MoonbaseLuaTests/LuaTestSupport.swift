import MoonbaseCore
import MoonbaseJSON
import Synchronization
@testable import MoonbaseLua

/// A fake host: `db.*` answers from an in-memory list, records calls, and runs
/// `db.transaction(fn)` / fires `beforeSave` triggers re-entrantly like the real one.
final class FakeHost: CloudHostAPI {
    let calls = Mutex<[String]>([])

    func call(_ ns: String, _ name: String, _ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> JSONValue {
        calls.withLock { $0.append("\(ns).\(name)") }
        switch (ns, name) {
        case ("db", "get"):
            guard let id = args.dropFirst().first?.stringValue else { throw ParseError(.invalidQuery, "objectId required") }
            if id == "missing" { return .null }
            if id == "forbidden" { throw ParseError(.objectNotFound, "Object not found.") }
            return ["objectId": .string(id), "className": args[0].json ?? .null]
        case ("db", "count"):
            return .int(42)
        case ("db", "find"):
            return .array([["objectId": "a"], ["objectId": "b"]])
        case ("db", "create"):
            guard let cls = args.first?.stringValue, var obj = args.dropFirst().first?.objectValue else {
                throw ParseError(.invalidJSON, "bad create")
            }
            if ctx.vm.hasTrigger(.beforeSave, cls) {
                let v = try ctx.vm.runTrigger(.beforeSave, className: cls, object: .object(obj),
                                              request: CloudRequest(identity: ctx.identity, user: ctx.user))
                obj = v?.objectValue ?? obj
            }
            obj["objectId"] = "new1"
            return .object(obj)
        case ("db", "transaction"):
            guard let fn = args.first?.function else { throw ParseError(.scriptFailed, "function expected") }
            return try ctx.vm.call(fn, [])
        case ("auth", "verifyPassword"):
            return .bool(args.dropFirst().first?.stringValue == "secret")
        default:
            return .null
        }
    }
}

/// Builds a VM with one loaded file.
func makeVM(_ source: String, file: String = "functions/test.lua", host: (any CloudHostAPI)? = FakeHost(),
            clock: any HostClock = SystemClock()) throws -> LuaVM {
    let vm = try LuaVM(host: host, clock: clock, randomId: { n in String(repeating: "x", count: n) })
    try vm.load(file: file, source: source)
    return vm
}

/// Defines `t` as a function running `body` and calls it.
func run(_ body: String, params: JSONObject = [:], limits: LuaLimits = .functionDefaults,
         vm existing: LuaVM? = nil) throws -> JSONValue {
    let vm = try existing ?? makeVM("cloud.define('t', function(req)\n\(body)\nend)")
    return try vm.runFunction("t", params: params, request: CloudRequest(), limits: limits)
}

/// The ParseError thrown by `body`, or nil.
func failure(_ body: () throws -> Any) -> ParseError? {
    do {
        _ = try body()
        return nil
    } catch let e as ParseError {
        return e
    } catch {
        return ParseError(.internalError, "\(error)")
    }
}

extension LuaLimits {
    static func quick(timeoutMs: Int64 = 10_000, memoryMB: Int64 = 64, dbOps: Int64 = 10_000, instructions: Int64 = 0) -> LuaLimits {
        LuaLimits(timeoutMs: timeoutMs, maxMemoryMB: memoryMB, maxDbOps: dbOps, maxInstructions: instructions)
    }
}
