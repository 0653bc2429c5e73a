import MoonbaseAuth
import MoonbaseCore
import MoonbaseJSON
import MoonbaseLua
import MoonbaseStore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One generation of Cloud Code: the sources of `functions/*.lua` as they were when loaded,
/// and what their load pass registered. VMs are built per thread from it.
public struct Generation: Sendable {
    public let id: Int
    public let sources: [(file: String, text: String)]
    public let registry: CloudRegistry
}

/// Cloud Code as the API sees it: the current generation (swapped whole on reload, so in-flight
/// calls finish on the VM they started on), one Lua VM per thread built lazily for the current
/// generation, the Lua host API (`db`, `files`, `auth`) and the trigger runner of the object
/// service.
///
/// Thread-safety: generation and load errors behind mutexes; VMs are thread-confined (a
/// `ThreadLocal` slot per thread).
public final class CloudService: Sendable {
    public let objects: ObjectService
    let auth: AuthService
    let files: FileStore
    let limits: LuaLimitsConfig
    let clock: any HostClock
    let current: Mutex<Generation>
    let errors = Mutex<[String: String]>([:])
    let slots = ThreadLocal<VMSlot> { VMSlot() }
    let nextId = Atomic<Int>(1)
    let onReload = Mutex<[@Sendable (Generation) -> Void]>([])
    /// Held for a whole load (read, compile, swap, observers): loads never overtake each other.
    let loadLock = Mutex<Void>(())
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
        current = Mutex(Generation(id: 0, sources: [], registry: CloudRegistry()))
    }

    public var generation: Generation { current.withLock { $0 } }
    public var registry: CloudRegistry { generation.registry }
    public var loadErrors: [String: String] { errors.withLock { $0 } }

    /// Called after every successful reload (routes, indexes, schedules).
    public func observeReload(_ f: @escaping @Sendable (Generation) -> Void) { onReload.withLock { $0.append(f) } }

    // MARK: loading

    /// Loads `sources` into a fresh VM; on success they become the current generation.
    /// A file that fails leaves the previous generation serving; its file:line is recorded.
    @discardableResult
    public func load(_ sources: [(file: String, text: String)]) -> [String: String] {
        loadLock.withLock { _ in loadUnlocked(sources) }
    }

    /// Runs `body` while no other load can start; `body` loads through the function it is given.
    /// The admin API reads the folder, loads and writes its file in one such step, so a reload
    /// of the folder started earlier cannot install older sources over the deployed ones. A
    /// candidate refused there is not recorded as a load error: it never reached the folder.
    public func exclusively(_ body: (([(file: String, text: String)]) -> [String: String]) throws(ParseError) -> [String: String])
        throws(ParseError) -> [String: String] {
        try loadLock.withLock { (_) throws(ParseError) -> [String: String] in try body { loadUnlocked($0, recordFailures: false) } }
    }

    func loadUnlocked(_ sources: [(file: String, text: String)], recordFailures: Bool = true) -> [String: String] {
        var failures: [String: String] = [:]
        var registry = CloudRegistry()
        do {
            let vm = try makeVM()
            for e in vm.loadAll(sources, limits: limits.loading, checkModules: true) { failures[e.file] = e.description }
            registry = vm.registry
        } catch {
            failures["*"] = "cannot create a Lua VM: \(error)"
        }
        if recordFailures || failures.isEmpty { errors.withLock { $0 = failures } }
        if !failures.isEmpty {
            for (f, e) in failures.sorted(by: { $0.key < $1.key }) { Log.error("cloud code not reloaded: \(f): \(e)") }
            return failures
        }
        let gen = Generation(id: nextId.wrappingAdd(1, ordering: .relaxed).oldValue, sources: sources, registry: registry)
        current.withLock { $0 = gen }
        Log.info("cloud code generation \(gen.id): \(sources.count) file(s), \(registry.functions.count) function(s), \(registry.jobs.count) job(s), \(registry.routes.count) route(s)")
        for f in onReload.withLock({ $0 }) { f(gen) }
        return [:]
    }

    /// Reads `dir/*.lua` and the modules under `dir/lib/` (sorted) and loads them. The folder is read under the load lock: loads
    /// run one at a time in the order they read their sources, so a slow reload of older
    /// sources never replaces a newer generation.
    @discardableResult
    public func loadDirectory(_ dir: String) -> [String: String] {
        loadLock.withLock { _ in loadUnlocked(CloudService.readSources(dir)) }
    }

    /// `dir/*.lua` as `name.lua`, then the modules `dir/lib/**/*.lua` as `lib/…/name.lua`
    /// (hidden names skipped, at most 4 folders deep).
    public static func readSources(_ dir: String) -> [(file: String, text: String)] {
        var out: [(file: String, text: String)] = []
        func read(_ rel: String, depth: Int) {
            let path = rel.isEmpty ? dir : dir + "/" + rel
            for name in FileSystem.list(path) where !name.hasPrefix(".") {
                let relName = rel.isEmpty ? name : rel + "/" + name
                if name.hasSuffix(".lua"), !FileSystem.isDirectory(path + "/" + name) {
                    guard let b = FileSystem.readFile(path + "/" + name) else { continue }
                    out.append((file: relName, text: String(decoding: b, as: UTF8.self)))
                } else if (rel.isEmpty ? name == "lib" : depth < 4), FileSystem.isDirectory(path + "/" + name) {
                    read(relName, depth: depth + 1)
                }
            }
        }
        read("", depth: 0)
        return out
    }

    func makeVM() throws(ParseError) -> LuaVM {
        try LuaVM(host: LuaHost(service: self), clock: clock)
    }

    /// This thread's VM for the current generation (built on first use after a reload).
    public func vm() throws(ParseError) -> LuaVM {
        let gen = generation
        let slot = slots.value
        if let vm = slot.vm, slot.generation == gen.id { return vm }
        let vm = try loadedVM(gen)
        slot.vm = vm
        slot.generation = gen.id
        return vm
    }

    /// A fresh VM with every file of `gen` loaded (per-thread VMs and job VMs alike).
    func loadedVM(_ gen: Generation) throws(ParseError) -> LuaVM {
        let vm = try makeVM()
        if let e = vm.loadAll(gen.sources, limits: limits.loading, checkModules: false).first {
            throw ParseError(.scriptFailed, "cloud code failed to load: \(e.description)")
        }
        return vm
    }

    // MARK: calls

    func request(_ c: CallerContext) -> CloudRequest {
        CloudRequest(identity: c.identity, user: c.user.map { .object($0) }, requestId: c.requestId,
                     headers: c.headers, ip: c.ip)
    }

    /// Runs with the caller's meter installed for nested `db.*` accounting, timing Lua CPU.
    func metered<T>(_ c: CallerContext, _ body: () throws(ParseError) -> T) throws(ParseError) -> T {
        let slot = slots.value
        let saved = slot.caller
        slot.caller = c
        let cpu0 = threadCPUNanos()
        defer {
            slot.caller = saved
            if saved == nil {
                c.meter?.luaCPUNanos &+= threadCPUNanos() &- cpu0
                dropVMOverItsLimit(slot)
            }
        }
        return try body()
    }

    /// A VM whose last call hit the VM memory limit holds module state that leaves too little
    /// room for calls: it is dropped (its memory freed and returned to the system) and the next
    /// call on this thread builds a fresh one from the current generation.
    func dropVMOverItsLimit(_ slot: VMSlot) {
        guard let vm = slot.vm, vm.depth == 0, vm.overVMMemoryLimit else { return }
        Log.warn("cloud code: a Lua VM reached its memory limit (\(vm.memoryInUse >> 20) MB in use); it is rebuilt, its module state is lost")
        slot.vm = nil
        slot.generation = -1
    }

    public func callFunction(_ name: String, params: JSONObject, caller: CallerContext) throws(ParseError) -> JSONValue {
        let vm = try vm()
        return try metered(caller) { () throws(ParseError) -> JSONValue in
            try vm.runFunction(name, params: params, request: request(caller), limits: limits.functions)
        }
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
        registry.functions[function]?.options.rateLimitPerMinute
    }

    public func runRoute(_ r: CloudRouteRequest, caller: CallerContext) throws(ParseError) -> CloudRouteResponse? {
        let vm = try vm()
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
        let vm = try loadedVM(gen)
        let caller = CallerContext(identity: .master, requestId: "job-" + name)
        let slot = slots.value
        let savedVM = (slot.vm, slot.generation)
        // Nested db.* triggers of the job run on the job's VM.
        slot.vm = vm
        slot.generation = gen.id
        defer { (slot.vm, slot.generation) = savedVM }
        return try metered(caller) { () throws(ParseError) -> String? in
            try vm.runJob(name, params: params, request: CloudRequest(identity: .master, requestId: caller.requestId),
                          limits: limits.jobs, callbacks: LuaJobCallbacks(progress: progress, message: message))
        }
    }
}

/// A thread's VM and the generation it was built for, and the caller of the Lua call running
/// on the thread (for nested `db.*` accounting and permissions).
final class VMSlot {
    var vm: LuaVM?
    var generation = -1
    var caller: CallerContext?
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
        registry.trigger(CloudService.kind(kind), className) != nil
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
