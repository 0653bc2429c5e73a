import MoonbaseCore
import Synchronization

/// One generation of Cloud Code: the sources of `functions/*.lua` (and `functions/lib/`) as they
/// were when loaded, and what their load pass registered. VMs are built per thread from it.
public struct Generation: Sendable {
    public let id: Int
    public let sources: [(file: String, text: String)]
    public let registry: CloudRegistry
    /// The trigger kinds of each class (`CloudTriggerKind.bit`): every read asks
    /// about afterFind and every write about four kinds, so the answer is one lookup by class
    /// name instead of a key string built (allocated and hashed) per question.
    let triggerKinds: [String: UInt16]

    init(id: Int, sources: [(file: String, text: String)], registry: CloudRegistry) {
        self.id = id
        self.sources = sources
        self.registry = registry
        var kinds: [String: UInt16] = [:]
        for kind in CloudTriggerKind.allCases {
            let prefix = CloudRegistry.triggerKey(kind, "")
            for key in registry.triggers.keys where key.hasPrefix(prefix) {
                kinds[String(key.dropFirst(prefix.count)), default: 0] |= kind.bit
            }
        }
        triggerKinds = kinds
    }
}

/// Cloud Code's generations and hot reload: loads a set of sources into a fresh VM, and when the
/// load pass succeeds swaps it in whole as the current generation (in-flight calls finish on the
/// VM they started on); keeps one VM per thread, rebuilt lazily for the current generation.
///
/// The host API the scripts call (`db`, `files`, `auth`, …) is given by the composition root as
/// a factory, so this module knows nothing of the store or the HTTP API.
///
/// Thread-safety: generation and load errors behind mutexes; loads run one at a time in the
/// order they read their sources; VMs are thread-confined (a `ThreadLocal` slot per thread).
///
/// ```swift
/// let code = CloudCode(makeHost: { MyHost() }, clock: SystemClock(), loading: .loadDefaults)
/// code.observeReload { gen in print("generation", gen.id) }
/// code.loadDirectory("functions")
/// let vm = try code.vm()
/// ```
public final class CloudCode: Sendable {
    let makeHost: @Sendable () -> any CloudHostAPI
    let clock: any HostClock
    let loading: LuaLimits
    /// Read by every call and every read's trigger check, from every thread: no shared lock.
    let current = ThreadSnapshot(Generation(id: 0, sources: [], registry: CloudRegistry()))
    let errors = Mutex<[String: String]>([:])
    let slots: ThreadLocal<VMSlot>
    /// Worker threads' slots by their seat, for an I/O thread that borrowed the seat.
    let seats: SeatSlots
    let nextId = Atomic<Int>(1)
    let onReload = Mutex<[@Sendable (Generation) -> Void]>([])
    /// Held for a whole load (read, compile, swap, observers): loads never overtake each other.
    let loadLock = Mutex<Void>(())

    public init(makeHost: @escaping @Sendable () -> any CloudHostAPI, clock: any HostClock, loading: LuaLimits) {
        self.makeHost = makeHost
        self.clock = clock
        self.loading = loading
        let seats = SeatSlots()
        self.seats = seats
        slots = ThreadLocal {
            let s = VMSlot()
            if let seat = WorkerSeat.own { seats.register(seat, s) }
            return s
        }
    }

    public var generation: Generation { current.current }
    public var registry: CloudRegistry { generation.registry }

    /// The current generation's rate limit of function `name`, if it declares one. Read in
    /// place: `registry` returns a copy of the generation and its registry (~1,700 instructions),
    /// and every request to a function asks this.
    public func rateLimitPerMinute(function name: String) -> Int? {
        current.read { $0.registry.functions[name]?.options.rateLimitPerMinute }
    }

    /// Whether the current generation has a `kind` trigger on `className`.
    public func hasTrigger(_ kind: CloudTriggerKind, _ className: String) -> Bool {
        current.read { g in
            (g.triggerKinds[className] ?? 0) & kind.bit != 0
        }
    }
    /// The files the last load refused, with their errors (`file:line: message`).
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
    /// A deploy reads the folder, loads and writes its file in one such step, so a reload of the
    /// folder started earlier cannot install older sources over the deployed ones. A candidate
    /// refused there is not recorded as a load error: it never reached the folder.
    public func exclusively(_ body: (([(file: String, text: String)]) -> [String: String]) throws(ParseError) -> [String: String])
        throws(ParseError) -> [String: String] {
        try loadLock.withLock { (_) throws(ParseError) -> [String: String] in try body { loadUnlocked($0, recordFailures: false) } }
    }

    func loadUnlocked(_ sources: [(file: String, text: String)], recordFailures: Bool = true) -> [String: String] {
        var failures: [String: String] = [:]
        var registry = CloudRegistry()
        do {
            let vm = try makeVM()
            for e in vm.loadAll(sources, limits: loading, checkModules: true) { failures[e.file] = e.description }
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
        current.update { $0 = gen }
        Log.info("cloud code generation \(gen.id): \(sources.count) file(s), \(registry.functions.count) function(s), \(registry.jobs.count) job(s), \(registry.routes.count) route(s)")
        for f in onReload.withLock({ $0 }) { f(gen) }
        return [:]
    }

    /// Reads the folder and loads it (`readSources`). The folder is read under the load lock:
    /// loads run one at a time in the order they read their sources, so a slow reload of older
    /// sources never replaces a newer generation.
    @discardableResult
    public func loadDirectory(_ dir: String) -> [String: String] {
        loadLock.withLock { _ in loadUnlocked(CloudCode.readSources(dir)) }
    }

    /// Loads what `read` returns, called under the load lock (nil: nothing to load). For a
    /// source chosen at load time (a folder or a deployed bundle), so that a load which started
    /// earlier cannot install what it chose before a newer load finished.
    @discardableResult
    public func load(reading read: () -> [(file: String, text: String)]?) -> [String: String] {
        loadLock.withLock { _ in
            guard let sources = read() else { return [:] }
            return loadUnlocked(sources)
        }
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
        try LuaVM(host: makeHost(), clock: clock)
    }

    // MARK: per-thread VMs

    /// This thread's VM for the current generation (built on first use after a reload).
    public func vm() throws(ParseError) -> LuaVM {
        let gen = generation
        if let seat = WorkerSeat.borrowed {
            // An I/O thread attempting a call on an idle worker's VM never builds one (loading
            // every file takes milliseconds): without a current VM the call goes to the worker.
            guard let slot = seats.slot(seat), let vm = slot.vm, slot.generation == gen.id else {
                throw LuaVM.continuesOnWorker
            }
            return vm
        }
        let slot = slots.value
        if let vm = slot.vm, slot.generation == gen.id { return vm }
        let vm = try loadedVM(gen)
        slot.vm = vm
        slot.generation = gen.id
        return vm
    }

    /// A fresh VM with every file of `gen` loaded (per-thread VMs and job VMs alike).
    public func loadedVM(_ gen: Generation) throws(ParseError) -> LuaVM {
        let vm = try makeVM()
        if let e = vm.loadAll(gen.sources, limits: loading, checkModules: false).first {
            throw ParseError(.scriptFailed, "cloud code failed to load: \(e.description)")
        }
        return vm
    }

    /// Runs `body` with `vm` (built for `gen`) as this thread's VM, so nested calls made from it
    /// (a job's `db.*` firing triggers) run on the same VM; the thread's own VM is restored after.
    public func withThreadVM<T>(_ vm: LuaVM, generation gen: Generation, _ body: () throws(ParseError) -> T) throws(ParseError) -> T {
        let slot = slots.value
        let saved = (slot.vm, slot.generation)
        slot.vm = vm
        slot.generation = gen.id
        defer { (slot.vm, slot.generation) = saved }
        return try body()
    }

    /// A VM whose last call hit the VM memory limit holds module state that leaves too little
    /// room for calls: it is dropped (its memory freed and returned to the system) and the next
    /// call on this thread builds a fresh one from the current generation.
    public func dropThreadVMIfOverLimit() {
        guard let slot = currentSlot, let vm = slot.vm, vm.depth == 0, !vm.hasPending, vm.overVMMemoryLimit else { return }
        Log.warn("cloud code: a Lua VM reached its memory limit (\(vm.memoryInUse >> 20) MB in use); it is rebuilt, its module state is lost")
        slot.vm = nil
        slot.generation = -1
    }

    /// The slot of the calling thread, or of the seat it borrowed (nil if that worker has none).
    var currentSlot: VMSlot? {
        if let seat = WorkerSeat.borrowed { return seats.slot(seat) }
        return slots.value
    }

    /// Drops a call an attempt left suspended on this thread's (or the borrowed seat's) VM when
    /// the request did not reach it again (it was refused on the worker before its Lua ran).
    public func discardPending() {
        if let vm = currentSlot?.vm, vm.hasPending { vm.discardPending() }
    }
}

/// A thread's VM and the generation it was built for.
final class VMSlot {
    var vm: LuaVM?
    var generation = -1
}

/// Worker threads' VM slots by seat. Weak: a slot lives as long as its worker thread.
final class SeatSlots: Sendable {
    private final class Entry: @unchecked Sendable {
        weak var slot: VMSlot?
        init(_ s: VMSlot) { slot = s }
    }
    private let bySeat = Mutex<[Int: Entry]>([:])

    func register(_ seat: Int, _ slot: VMSlot) {
        bySeat.withLock { m in
            m = m.filter { $0.value.slot != nil }
            m[seat] = Entry(slot)
        }
    }

    func slot(_ seat: Int) -> VMSlot? { bySeat.withLock { $0[seat]?.slot } }
}
