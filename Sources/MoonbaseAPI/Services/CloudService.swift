import MoonbaseAuth
import MoonbaseCore
import MoonbaseJSON
import MoonbaseLua
import MoonbaseStore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Cloud Code as the API sees it: the generations and per-thread VMs (`CloudCode`, in the Lua
/// module), the Lua host API (`LuaHost`: `db`, `files`, `auth`, …) given to it as a factory, the
/// caller of the Lua call running on each thread (for nested `db.*` accounting and
/// permissions), and the store's trigger runner.
///
/// Thread-safety: `CloudCode` guards its generation; callers are thread-confined (a
/// `ThreadLocal` slot per thread).
public final class CloudService: Sendable {
    public let objects: ObjectService
    let auth: AuthService
    let files: FileStore
    let limits: LuaLimitsConfig
    let clock: any HostClock
    /// Generations, hot reload and this thread's VM.
    public let code: CloudCode
    let callers = ThreadLocal<CallerSlot> { CallerSlot() }
    let servicesBox = Mutex<Services?>(nil)

    /// The services this Cloud Code belongs to (set once by `Services.init`; a process-lifetime
    /// reference cycle, on purpose).
    var services: Services? { servicesBox.withLock { $0 } }

    public init(objects: ObjectService, auth: AuthService, files: FileStore, limits: LuaLimitsConfig,
                clock: any HostClock) {
        self.objects = objects
        self.auth = auth
        self.files = files
        self.limits = limits
        self.clock = clock
        let box = WeakCloudService()
        // VMs are built only after init returns (the first load), so the box is filled by then;
        // the lock is taken once per VM built, not per call.
        code = CloudCode(makeHost: { LuaHost(service: box.value!) }, clock: clock, loading: limits.loading)
        box.set(self)
    }

    public var generation: Generation { code.generation }
    public var registry: CloudRegistry { code.registry }
    public var loadErrors: [String: String] { code.loadErrors }

    /// Called after every successful reload (routes, indexes, schedules).
    public func observeReload(_ f: @escaping @Sendable (Generation) -> Void) { code.observeReload(f) }

    @discardableResult
    public func loadDirectory(_ dir: String) -> [String: String] { code.loadDirectory(dir) }

    func vm() throws(ParseError) -> LuaVM { try code.vm() }

    /// How long a function or route call attempted on an HTTP I/O thread may run there before
    /// it yields and moves to its worker: short enough that the other connections of that
    /// thread barely notice, long enough for most calls to finish.
    public static let attemptBudgetNanos: Int64 = 1_000_000

    /// Runs `body` (the request's pipeline, on an I/O thread that borrowed an idle worker's
    /// seat) with the function or route call it reaches attempted there (see
    /// `LuaVM.attemptNanos`). A call that must continue on the worker throws
    /// `LuaVM.continuesOnWorker` through the pipeline.
    public func attempting<T>(_ body: () -> T) -> T {
        let slot = callers.value
        slot.attempting = true
        defer { slot.attempting = false }
        return body()
    }

    /// Drops a call an attempt left suspended on this worker's VM that its request did not reach.
    public func discardPending() { code.discardPending() }

    /// Arms an attempt for the outermost call about to run on `vm`, when attempting.
    func armAttempt(_ vm: LuaVM) {
        let slot = callers.value
        if slot.attempting && slot.caller == nil { vm.attemptNanos = CloudService.attemptBudgetNanos }
    }

    // MARK: calls

    func request(_ c: CallerContext) -> CloudRequest {
        CloudRequest(identity: c.identity, user: c.user.map { .object($0) }, requestId: c.requestId,
                     headers: c.headers, ip: c.ip)
    }

    /// Runs with the caller's meter installed for nested `db.*` accounting, timing Lua CPU.
    func metered<T>(_ c: CallerContext, _ body: () throws(ParseError) -> T) throws(ParseError) -> T {
        let slot = callers.value
        let saved = slot.caller
        slot.caller = c
        // An attempt on an I/O thread runs for at most about a millisecond without blocking: its
        // wall time stands for its CPU time, read from the vDSO clock instead of two system
        // calls for the thread's CPU clock (a sizeable share of a call that takes microseconds).
        let attempt = slot.attempting
        let cpu0 = attempt ? monotonicNanos() : threadCPUNanos()
        defer {
            slot.caller = saved
            if saved == nil {
                c.meter?.luaCPUNanos &+= (attempt ? monotonicNanos() : threadCPUNanos()) &- cpu0
                code.dropThreadVMIfOverLimit()
            }
        }
        return try body()
    }

    /// Runs the function and answers `{"result": …}` with the return value as the bridge wrote
    /// it (no value tree in between): the body of `POST /parse/functions/NAME` and of
    /// `moonbase call`.
    public func functionAnswer(_ name: String, params: JSONObject, caller: CallerContext) throws(ParseError) -> [UInt8] {
        let vm = try vm()
        armAttempt(vm)
        defer { vm.attemptNanos = 0 }   // (not consumed when the call failed before running)
        let result = try metered(caller) { () throws(ParseError) -> [UInt8] in
            try vm.runFunctionText(name, params: params, request: request(caller), limits: limits.functions)
        }
        var body: [UInt8] = []
        body.reserveCapacity(result.count + 11)
        body.append(contentsOf: #"{"result":"#.utf8)
        body.append(contentsOf: result)
        body.append(UInt8(ascii: "}"))
        return body
    }

    /// Runs the `cloud.sendEmail` hook on this thread's VM, as master; false when none is declared.
    public func sendEmail(_ message: JSONObject) throws(ParseError) -> Bool {
        let vm = try vm()
        return try metered(CallerContext(identity: .master, requestId: "mail")) { () throws(ParseError) -> Bool in
            try vm.runEmailHook(message, limits: limits.functions)
        }
    }

    public func hasJob(_ name: String) -> Bool { registry.jobs[name] != nil }

    public func rateLimitPerMinute(function: String) -> Int? {
        code.rateLimitPerMinute(function: function)
    }

    public func runRoute(_ r: CloudRouteRequest, caller: CallerContext) throws(ParseError) -> CloudRouteResponse? {
        let vm = try vm()
        armAttempt(vm)
        defer { vm.attemptNanos = 0 }   // (not consumed when the call failed before running)
        return try metered(caller) { () throws(ParseError) -> CloudRouteResponse? in
            try vm.runRoute(r, limits: limits.functions)
        }
    }

    /// Runs a job on a VM of its own (the calling thread is the job's own thread).
    public func runJob(_ name: String, params: JSONObject, progress: @escaping (Double?, String?) -> Void,
                       message: @escaping (String) -> Void) throws(ParseError) -> String? {
        // One read of the generation: a reload between two reads could pair one generation's
        // sources with another's id.
        let gen = generation
        let vm = try code.loadedVM(gen)
        let caller = CallerContext(identity: .master, requestId: "job-" + name)
        // Nested db.* triggers of the job run on the job's VM.
        return try code.withThreadVM(vm, generation: gen) { () throws(ParseError) -> String? in
            try metered(caller) { () throws(ParseError) -> String? in
                try vm.runJob(name, params: params, request: CloudRequest(identity: .master, requestId: caller.requestId),
                              limits: limits.jobs, callbacks: LuaJobCallbacks(progress: progress, message: message))
            }
        }
    }
}

/// The caller of the Lua call running on a thread (for nested `db.*` accounting and permissions).
final class CallerSlot {
    var caller: CallerContext?
    /// The request's function or route call is attempted on this (I/O) thread.
    var attempting = false
}

/// How `LuaHost`s reach their Cloud Code: the factory is made before the service exists, and a
/// strong reference back would be a cycle through `CloudCode`.
final class WeakCloudService: Sendable {
    private let ref = Mutex<Weak>(Weak())
    struct Weak { weak var value: CloudService? }
    func set(_ s: CloudService) { ref.withLock { $0.value = s } }
    var value: CloudService? { ref.withLock { $0.value } }
}

// MARK: - triggers

extension CloudService: TriggerRunner {
    /// The object service's data triggers as Cloud Code registers them: a total mapping (Cloud
    /// Code's kinds also hold the realtime triggers, which writes never fire).
    static func kind(_ k: TriggerKind) -> CloudTriggerKind {
        switch k {
        case .beforeSave: .beforeSave
        case .afterSave: .afterSave
        case .beforeDelete: .beforeDelete
        case .afterDelete: .afterDelete
        case .afterFind: .afterFind
        }
    }

    public func hasTrigger(_ kind: TriggerKind, _ className: String) -> Bool {
        code.hasTrigger(CloudService.kind(kind), className)
    }

    /// Runs a save/delete trigger; it holds the writer when its write is open on this thread
    /// (before-triggers inside the write, after-triggers in their own transaction).
    func runWriteTrigger(_ vm: LuaVM, _ caller: CallerContext,
                         _ body: () throws(ParseError) -> JSONValue?) throws(ParseError) -> JSONValue? {
        try metered(caller) { () throws(ParseError) -> JSONValue? in
            guard objects.store.inTransaction else { return try body() }
            return try vm.holdingWriter(limits.functions, body)
        }
    }

    public func runSave(_ kind: TriggerKind, className: String, object: JSONObject, original: JSONObject?,
                        caller: CallerContext) throws(ParseError) -> JSONObject {
        let vm = try vm()
        let out = try runWriteTrigger(vm, caller) { () throws(ParseError) -> JSONValue? in
            try vm.runTrigger(CloudService.kind(kind), className: className,
                              object: .object(LuaObjects.tagged(object, className)),
                              original: original.map { .object(LuaObjects.tagged($0, className)) },
                              request: request(caller), limits: limits.functions)
        }
        return out?.objectValue.map { LuaObjects.untagged($0, className) } ?? object
    }

    public func runDelete(_ kind: TriggerKind, className: String, object: JSONObject, caller: CallerContext) throws(ParseError) {
        let vm = try vm()
        _ = try runWriteTrigger(vm, caller) { () throws(ParseError) -> JSONValue? in
            try vm.runTrigger(CloudService.kind(kind), className: className,
                              object: .object(LuaObjects.tagged(object, className)),
                              request: request(caller), limits: limits.functions)
        }
    }

    public func runAfterFind(className: String, objects: [JSONObject], caller: CallerContext) throws(ParseError) -> [JSONObject] {
        let vm = try vm()
        let out = try metered(caller) { () throws(ParseError) -> JSONValue? in
            try vm.runTrigger(.afterFind, className: className,
                              objects: objects.map { .object(LuaObjects.tagged($0, className)) },
                              request: request(caller), limits: limits.functions)
        }
        guard let arr = out?.arrayValue else { return objects }
        return arr.compactMap { $0.objectValue.map { LuaObjects.untagged($0, className) } }
    }
}
