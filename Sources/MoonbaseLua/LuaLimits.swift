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
    /// How long Lua code may run while its thread holds the single database writer (inside
    /// `db.transaction(fn)`, a `beforeSave`/`beforeDelete` trigger's write, an after-trigger's
    /// transaction). Every other write in the process waits meanwhile, so this is much shorter
    /// than the call's timeout.
    public var writerHoldMs: Int64

    public init(timeoutMs: Int64, maxMemoryMB: Int64, maxDbOps: Int64, maxInstructions: Int64 = 0,
                writerHoldMs: Int64 = LuaLimits.defaultWriterHoldMs) {
        self.timeoutMs = timeoutMs
        self.maxMemoryBytes = maxMemoryMB << 20
        self.maxDbOps = maxDbOps
        self.maxInstructions = maxInstructions
        self.writerHoldMs = writerHoldMs
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
                                              writerHoldMs: LuaLimits.jobWriterHoldMs)
    /// Loading a file's top level (hot reload, `moonbase check`).
    public static let loadDefaults = LuaLimits(timeoutMs: 5_000, maxMemoryMB: 64, maxDbOps: 0)

    /// Applies `MOONBASE_LUA_TIMEOUT_MS`, `MOONBASE_LUA_MAX_MEMORY_MB`, `MOONBASE_LUA_MAX_DB_OPS`,
    /// `MOONBASE_LUA_MAX_INSTRUCTIONS` and `MOONBASE_LUA_WRITER_HOLD_MS` over these limits.
    /// - Throws: `ParseError` 1 naming the variable when a value is not a non-negative integer.
    public func overridden(by env: [String: String]) throws(ParseError) -> LuaLimits {
        var l = self
        func read(_ key: String) throws(ParseError) -> Int64? {
            guard let text = env[key] else { return nil }
            guard let v = Int64(text), v >= 0 else {
                throw ParseError(.internalError, "invalid \(key): \(text)")
            }
            return v
        }
        if let v = try read("MOONBASE_LUA_TIMEOUT_MS") { l.timeoutMs = v }
        if let v = try read("MOONBASE_LUA_MAX_MEMORY_MB") { l.maxMemoryBytes = v << 20 }
        if let v = try read("MOONBASE_LUA_MAX_DB_OPS") { l.maxDbOps = v }
        if let v = try read("MOONBASE_LUA_MAX_INSTRUCTIONS") { l.maxInstructions = v }
        if let v = try read("MOONBASE_LUA_WRITER_HOLD_MS") { l.writerHoldMs = v }
        return l
    }

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
    public init(functions: LuaLimits = .functionDefaults, jobs: LuaLimits = .jobDefaults,
                loading: LuaLimits = .loadDefaults) {
        self.functions = functions
        self.jobs = jobs
        self.loading = loading
    }
    /// Defaults overridden by the `MOONBASE_LUA_*` variables (they apply to functions,
    /// triggers and routes; jobs keep their own defaults except for an explicit instruction budget).
    public static func fromEnvironment(_ env: [String: String]) throws(ParseError) -> LuaLimitsConfig {
        var c = LuaLimitsConfig()
        c.functions = try c.functions.overridden(by: env)
        if let v = env["MOONBASE_LUA_MAX_INSTRUCTIONS"], let n = Int64(v) { c.jobs.maxInstructions = n }
        return c
    }
}
