import MoonbaseCore
import MoonbaseJSON

/// The host side of the `db`, `files`, `auth`, `http` and `config` namespaces, implemented by
/// MoonbaseAPI over the store (one namespace per concern, registered by name).
///
/// Contract:
/// - `call` runs on the thread of the VM that called it, while the Lua call is suspended.
/// - `db.*` options arrive as a last table argument (`{master = true, order = "-createdAt"}`).
/// - To run Lua again (the `fn` of `db.transaction(fn)`, a trigger fired by `db.create`), use
///   `ctx.vm`: `ctx.vm.call(fn, [])` or `ctx.vm.runTrigger(...)`; nested calls share the
///   outermost call's limits and DB-operation budget.
/// - Throw `ParseError` for failures: the script sees an error table `{code=, message=}` that it
///   may catch with `pcall`; uncaught, the call answers with that code.
/// - Return `.null` for Lua `nil`.
public protocol CloudHostAPI: Sendable {
    /// Runs `namespace.name(args...)`. Each `db.*` call has already been counted against the
    /// call's DB-operation budget.
    func call(_ namespace: String, _ name: String, _ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> JSONValue
    /// The same call, answered as a value or as JSON text the bridge decodes straight into Lua
    /// (objects read from the store cross once, as their stored text, instead of being parsed
    /// into a value and encoded again). The default answers `call`'s value.
    func answer(_ namespace: String, _ name: String, _ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> HostAnswer
    /// The outermost call on this thread ended (returned, failed, was killed, or suspended to
    /// finish on another thread): per-call state the host keeps for the thread ends here.
    func callEnded(_ ctx: LuaCallContext)
}

extension CloudHostAPI {
    public func callEnded(_ ctx: LuaCallContext) {}

    public func answer(_ namespace: String, _ name: String, _ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> HostAnswer {
        .value(try call(namespace, name, args, ctx))
    }
}

/// What a host function hands back to Lua.
public enum HostAnswer {
    /// A value (`.null` for `nil`).
    case value(JSONValue)
    /// JSON text (an object or an array), decoded by the bridge in C. With `className`, every
    /// object of it (the value itself, or each element of an array) that has no `className`
    /// field gets this one, as objects handed to Lua carry their class.
    case json([UInt8], className: String?)
}

/// The host namespaces and their functions.
public enum CloudHostNamespaces {
    public static let standard: [String: [String]] = [
        "db": ["get", "find", "first", "count", "distinct", "create", "update", "delete",
               "deleteWhere", "updateWhere", "transaction", "changes"],
        "files": ["delete"],
        "auth": ["verifyPassword", "revokeSessions"],
        "http": ["request"],
        "config": ["get"],
    ]
}

/// Counters shared by a call and the calls nested in it.
public final class LuaCallCounters {
    public internal(set) var dbOps: Int64 = 0
    /// `http.request` calls made so far (the host enforces its cap).
    public var httpRequests: Int = 0
    public init() {}
}

/// The per-call slot (Redis's RUN_CTX): set before a call and cleared after it.
///
/// Thread-confined: it lives on the VM's thread for the duration of one call.
public final class LuaCallContext {
    /// Who is calling.
    public let identity: Identity
    /// The caller's user object (`req.user`), if any.
    public let user: JSONValue?
    public let requestId: String?
    /// The cloud function, job, trigger (`beforeSave Post`) or route (`GET /x`) being run.
    public let functionName: String
    /// The limits in force (the outermost call's).
    public let limits: LuaLimits
    /// DB operations used so far, shared with nested calls.
    public let counters: LuaCallCounters
    /// The VM running the call, for re-entrant calls back into Lua.
    public unowned let vm: LuaVM
    /// Job callbacks (`req.progress`, `req.message`).
    var job: LuaJobCallbacks?

    public var isMaster: Bool { identity.isMaster }

    init(identity: Identity, user: JSONValue?, requestId: String?, functionName: String,
         limits: LuaLimits, counters: LuaCallCounters, vm: LuaVM, job: LuaJobCallbacks? = nil) {
        self.identity = identity
        self.user = user
        self.requestId = requestId
        self.functionName = functionName
        self.limits = limits
        self.counters = counters
        self.vm = vm
        self.job = job
    }
}

/// Swift callbacks of a running job.
public struct LuaJobCallbacks {
    public var progress: (Double?, String?) -> Void
    public var message: (String) -> Void
    public init(progress: @escaping (Double?, String?) -> Void, message: @escaping (String) -> Void) {
        self.progress = progress
        self.message = message
    }
}
