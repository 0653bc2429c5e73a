import CLuaBridge
import MoonbaseCore

/// Limits of one Lua call. `0` switches a limit off.
///
/// Nested calls (a trigger fired by `db.create` inside a function, `db.transaction(fn)`) share
/// the outermost call's limits and counters.
public struct LuaLimits: Sendable, Hashable {
    /// Wall time, enforced by the watchdog thread (zero cost on the hot path).
    public var timeoutMs: Int64
    /// Heap growth allowed above the VM's heap at call start, in bytes (the capped allocator).
    public var maxMemoryBytes: Int64
    /// `db.*` calls per call, nested triggers included.
    public var maxDbOps: Int64
    /// Instruction budget (a count hook, installed only when non-zero: it slows every instruction).
    public var maxInstructions: Int64
    /// How long Lua code may run while its thread holds the single database writer (inside
    /// `db.transaction(fn)`, a `beforeSave`/`beforeDelete` trigger's write, an after-trigger's
    /// transaction). Every other write in the process waits meanwhile, so this is much shorter
    /// than the call's timeout.
    public var writerHoldMs: Int64
    /// The VM's whole heap (module state, i.e. file-level locals, plus the running call), in
    /// bytes. `maxMemoryBytes` only counts one call's growth, so without this cap module state
    /// could grow across calls without bound. A call stopped by it ends with 141 and the host
    /// rebuilds the VM (`LuaVM.overVMMemoryLimit`). 0 = no cap (jobs: their VM is their own).
    public var maxVMMemoryBytes: Int64
    /// The JSON text of a call's result (a function's result, a route's response, a trigger's
    /// object), in bytes: the host copies and converts it, so it is capped before that.
    public var maxResultBytes: Int64

    public init(timeoutMs: Int64, maxMemoryMB: Int64, maxDbOps: Int64, maxInstructions: Int64 = 0,
                writerHoldMs: Int64 = LuaLimits.defaultWriterHoldMs,
                maxVMMemoryMB: Int64 = LuaLimits.defaultVMMemoryMB, maxResultMB: Int64 = LuaLimits.defaultResultMB) {
        self.timeoutMs = timeoutMs
        self.maxMemoryBytes = maxMemoryMB << 20
        self.maxDbOps = maxDbOps
        self.maxInstructions = maxInstructions
        self.writerHoldMs = writerHoldMs
        self.maxVMMemoryBytes = maxVMMemoryMB << 20
        self.maxResultBytes = maxResultMB << 20
    }

    /// 96 MB: a call's default 64 MB on top of up to 32 MB of module state. Each worker has a
    /// VM, so this also bounds what module state can pin per worker.
    public static let defaultVMMemoryMB: Int64 = 96
    /// 16 MB of JSON: far above any page of results a client should get in one answer, and small
    /// enough that the host's copies of it stay a modest share of the memory budget.
    public static let defaultResultMB: Int64 = 16

    /// The C bridge's view of these limits.
    var bridge: lb_limits {
        lb_limits(timeout_ms: timeoutMs, max_memory: maxMemoryBytes, max_instructions: maxInstructions,
                  max_vm_memory: maxVMMemoryBytes, max_result: maxResultBytes, attempt_ns: 0)
    }

    /// 2 s: a write transaction of a request normally holds the writer for milliseconds; two
    /// seconds leave room for a trigger that writes a few thousand rows, while a script that
    /// spins inside a transaction stalls every other writer for at most that long (not for the
    /// whole 10 s call timeout).
    public static let defaultWriterHoldMs: Int64 = 2_000
    /// Jobs do bulk work in transactions on purpose (cleanups, migrations): 30 s.
    public static let jobWriterHoldMs: Int64 = 30_000

    public var maxMemoryMB: Int64 { maxMemoryBytes >> 20 }

    /// Functions, triggers and routes: 10 s, 64 MB, 10,000 DB operations.
    public static let functionDefaults = LuaLimits(timeoutMs: 10_000, maxMemoryMB: 64, maxDbOps: 10_000)
    /// Jobs: 1 hour, 256 MB, no DB-operation limit.
    public static let jobDefaults = LuaLimits(timeoutMs: 3_600_000, maxMemoryMB: 256, maxDbOps: 0,
                                              writerHoldMs: LuaLimits.jobWriterHoldMs, maxVMMemoryMB: 0)
    /// Loading a file's top level (hot reload, `moonbase check`).
    public static let loadDefaults = LuaLimits(timeoutMs: 5_000, maxMemoryMB: 64, maxDbOps: 0)

    /// These limits with a function's own options (`timeoutMs`, `maxMemoryMB`, `maxDbOps`,
    /// `maxInstructions`, `writerHoldMs`) applied.
    public func applying(_ o: CloudFunctionOptions) -> LuaLimits {
        var l = self
        if let v = o.timeoutMs { l.timeoutMs = v }
        if let v = o.maxMemoryMB { l.maxMemoryBytes = v << 20 }
        if let v = o.maxDbOps { l.maxDbOps = v }
        if let v = o.maxInstructions { l.maxInstructions = v }
        if let v = o.writerHoldMs { l.writerHoldMs = v }
        return l
    }
}

/// The limits the host configured for each kind of call.
public struct LuaLimitsConfig: Sendable {
    public var functions: LuaLimits
    public var jobs: LuaLimits
    public var loading: LuaLimits
    /// Loading runs in the VMs that serve calls, so it keeps the functions' VM memory cap; the
    /// response cap applies to jobs' results too.
    public init(functions: LuaLimits = .functionDefaults, jobs: LuaLimits = .jobDefaults,
                loading: LuaLimits = .loadDefaults) {
        self.functions = functions
        self.jobs = jobs
        self.loading = loading
        self.loading.maxVMMemoryBytes = functions.maxVMMemoryBytes
        self.jobs.maxResultBytes = functions.maxResultBytes
    }
}
