import CLuaBridge
import MoonbaseCore
import MoonbaseJSON
import MoonbaseCrypto

/// One Lua 5.4 state with the Moonbase sandbox, reused across calls.
///
/// Thread-confined: create it and use it on one thread (a worker owns one VM; each running job
/// gets its own). Re-entrant on that thread: a host function may call back into Lua through
/// `call(_:_:)` or the `run*` methods, and nested calls share the outermost call's limits.
///
/// Bridge rules: only CLuaBridge includes lua.h; every entry into Lua
/// is `lua_pcall` of a C body; Lua→Swift calls go through the C trampoline, which raises only
/// after Swift returned. With `strict` (the default in debug builds) the allocator aborts if
/// Lua allocates while a Swift frame is live.
///
/// ```swift
/// let vm = try LuaVM()
/// try vm.load(file: "functions/hello.lua", source: #"cloud.define("hello", function(req) return "hi" end)"#)
/// let v = try vm.runFunction("hello", params: [:], request: CloudRequest())   // .string("hi")
/// ```
public final class LuaVM {
    private var raw: OpaquePointer!
    let host: (any CloudHostAPI)?
    let clock: any HostClock
    let randomId: @Sendable (Int) -> String
    public let strict: Bool
    var bindings: [HostBinding] = []
    var contexts: [LuaCallContext] = []
    var loadingFile: String?
    /// Handlers and declarations collected by `load`.
    public internal(set) var registry = CloudRegistry()
    var handlerRefs: [CloudHandlerKey: Int32] = [:]
    let progressFn: Int64
    let messageFn: Int64
    /// Set by the host just before an outermost call that should run as an attempt (on an HTTP
    /// I/O thread): the call suspends itself after this many nanoseconds, or at its first host
    /// function that may block or act outside the call (`db.*`, `http`, `log`), and
    /// `LuaVM.continuesOnWorker` is thrown; the next outermost `invoke` of the same handler on
    /// this VM (on the worker) resumes it instead of starting anew. Consumed by that call.
    public var attemptNanos: Int64 = 0
    /// The handler whose call is suspended on this VM (see `attemptNanos`).
    var pendingRef: Int32?
    /// Handlers whose attempt once ran past its budget where it could not yield: they are no
    /// longer attempted on this VM (they go to the worker at once).
    var notAttempted: Set<Int32> = []

    #if DEBUG
    public static let defaultStrict = true
    #else
    public static let defaultStrict = false
    #endif

    /// - Parameters:
    ///   - host: implements the host namespaces (`db`, `files`, `auth`); calls to them fail with
    ///     141 when nil.
    ///   - namespaces: host namespace → function names to expose.
    ///   - clock: `time.now()`.
    ///   - randomId: `crypto.randomId(n)`.
    /// - Throws: `ParseError` 1 when the state cannot be created.
    public init(host: (any CloudHostAPI)? = nil,
                namespaces: [String: [String]] = CloudHostNamespaces.standard,
                clock: any HostClock = SystemClock(),
                randomId: @escaping @Sendable (Int) -> String = { LuaVM.defaultRandomId($0) },
                strict: Bool = LuaVM.defaultStrict) throws(ParseError) {
        self.host = host
        self.clock = clock
        self.randomId = randomId
        self.strict = strict
        var b: [HostBinding] = []
        for ns in namespaces.keys.sorted() {
            for name in namespaces[ns]! { b.append(.host(ns, name)) }
        }
        b.append(.print(.info))
        b.append(contentsOf: [.log(.debug), .log(.info), .log(.warn), .log(.error), .timeNow, .randomId])
        b.append(contentsOf: CryptoOp.allCases.map { .crypto($0) })
        for d in CloudDeclaration.allCases { b.append(.cloud(d)) }
        progressFn = Int64(b.count)
        b.append(.jobProgress)
        messageFn = Int64(b.count)
        b.append(.jobMessage)
        bindings = b
        guard let vm = lb_new(strict ? 1 : 0, luaHostTrampoline, Unmanaged.passUnretained(self).toOpaque()) else {
            throw ParseError.internalError("cannot create a Lua state")
        }
        raw = vm
        try Self.installErrorCodes(vm)
        for (i, binding) in bindings.enumerated() {
            guard let (ns, name) = binding.luaName else { continue }
            guard lb_register(vm, ns, name, Int64(i)) == 0 else {
                throw ParseError.internalError("cannot register \(ns).\(name)")
            }
            if binding.inlineSafe { lb_set_inline_safe(vm, Int64(i)) }
        }
    }

    /// Thrown by a call attempted on an I/O thread that must be finished on the worker whose VM
    /// it ran on (see `attemptNanos`); recognised by `isContinuesOnWorker`.
    public static let continuesOnWorker = ParseError(.internalError, "the call continues on a worker",
                                                     underlying: LuaVM.continuesMarker)
    static let continuesMarker = "lua: continues on a worker"

    /// True for `continuesOnWorker`.
    public static func isContinuesOnWorker(_ e: ParseError) -> Bool { e.underlying == continuesMarker }

    /// A call is suspended on this VM, waiting for its worker.
    public var hasPending: Bool { pendingRef != nil && lb_suspended(raw) != 0 }

    /// Drops a suspended call nobody will finish (its request took another path on the worker).
    public func discardPending() {
        guard pendingRef != nil else { return }
        pendingRef = nil
        lb_discard_suspended(raw)
    }

    deinit { lb_close(raw) }

    /// `cloud.codes`: the Parse error codes by their SDK names, from the one list in
    /// `ParseErrorCode.named`.
    private static func installErrorCodes(_ vm: OpaquePointer) throws(ParseError) {
        let spec = ParseErrorCode.named.map { "\($0.name) \($0.code.rawValue)\n" }.joined()
        guard lb_set_error_codes(vm, spec) == 0 else { throw ParseError.internalError("cannot install cloud.codes") }
    }

    /// The default `crypto.randomId` source: libsodium via MoonbaseCrypto.
    public static func defaultRandomId(_ n: Int) -> String { Random.alphanumeric(n) }

    /// Bytes currently allocated by the Lua heap.
    public var memoryInUse: Int { lb_memory(raw) }
    /// The last call was stopped by the VM memory limit: this VM's module state leaves too little
    /// room, so the host drops it and builds a fresh one from the current generation.
    public var overVMMemoryLimit: Bool { lb_over_vm_limit(raw) != 0 }
    /// Nesting of calls currently running on this VM (0 when idle).
    public var depth: Int { Int(lb_depth(raw)) }
    /// Values left on the Lua stack (0 when idle: the harness checks the stack stays balanced).
    public var stackTop: Int { Int(lb_stack_top(raw)) }
    /// Milliseconds left before the running call's wall-time limit: 0 once it passed (or the call
    /// was killed), nil when the call has no time limit. Outbound I/O bounds itself by this.
    public var callRemainingMillis: Int64? {
        let v = lb_call_remaining_ms(raw)
        return v < 0 ? nil : v
    }
    /// The running call's context (nil when idle).
    public var currentContext: LuaCallContext? { contexts.last }

    var handle: OpaquePointer { raw }
}

/// The one C entry point for every host function (a global `@convention(c)` let: a closure literal cannot be a C function pointer).
/// `ctx` is the `LuaVM`, passed unretained: the VM owns the state, so it outlives every call.
let luaHostTrampoline: lb_host_fn = { ctx, fnid, args, nargs, out in
    let vm = Unmanaged<LuaVM>.fromOpaque(ctx!).takeUnretainedValue()
    return vm.dispatch(Int(fnid), args!, Int(nargs), out!)
}
