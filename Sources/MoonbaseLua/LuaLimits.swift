import MoonbaseCore

/// Limits of one Lua call (DESIGN §5). `0` switches a limit off.
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

    public init(timeoutMs: Int64, maxMemoryMB: Int64, maxDbOps: Int64, maxInstructions: Int64 = 0) {
        self.timeoutMs = timeoutMs
        self.maxMemoryBytes = maxMemoryMB << 20
        self.maxDbOps = maxDbOps
        self.maxInstructions = maxInstructions
    }

    public var maxMemoryMB: Int64 { maxMemoryBytes >> 20 }

    /// Functions, triggers and routes: 10 s, 64 MB, 10,000 DB operations.
    public static let functionDefaults = LuaLimits(timeoutMs: 10_000, maxMemoryMB: 64, maxDbOps: 10_000)
    /// Jobs: 1 hour, 256 MB, no DB-operation limit.
    public static let jobDefaults = LuaLimits(timeoutMs: 3_600_000, maxMemoryMB: 256, maxDbOps: 0)
    /// Loading a file's top level (hot reload, `moonbase check`).
    public static let loadDefaults = LuaLimits(timeoutMs: 5_000, maxMemoryMB: 64, maxDbOps: 0)

    /// These limits with a function's own options (`timeoutMs`, `maxMemoryMB`, `maxDbOps`,
    /// `maxInstructions`) applied.
    public func applying(_ o: CloudFunctionOptions) -> LuaLimits {
        var l = self
        if let v = o.timeoutMs { l.timeoutMs = v }
        if let v = o.maxMemoryMB { l.maxMemoryBytes = v << 20 }
        if let v = o.maxDbOps { l.maxDbOps = v }
        if let v = o.maxInstructions { l.maxInstructions = v }
        return l
    }
}

/// The limits the host configured for each kind of call.
public struct LuaLimitsConfig: Sendable {
    public var functions: LuaLimits
    public var jobs: LuaLimits
    public var loading: LuaLimits
    public init(functions: LuaLimits = .functionDefaults, jobs: LuaLimits = .jobDefaults,
                loading: LuaLimits = .loadDefaults) {
        self.functions = functions
        self.jobs = jobs
        self.loading = loading
    }
}
