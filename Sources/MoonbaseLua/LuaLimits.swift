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

    /// Applies `MOONBASE_LUA_TIMEOUT_MS`, `MOONBASE_LUA_MAX_MEMORY_MB`, `MOONBASE_LUA_MAX_DB_OPS`
    /// and `MOONBASE_LUA_MAX_INSTRUCTIONS` (read by the host) over these limits.
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
        return l
    }

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
    /// Defaults overridden by the `MOONBASE_LUA_*` variables (they apply to functions,
    /// triggers and routes; jobs keep their own defaults except for an explicit instruction budget).
    public static func fromEnvironment(_ env: [String: String]) throws(ParseError) -> LuaLimitsConfig {
        var c = LuaLimitsConfig()
        c.functions = try c.functions.overridden(by: env)
        if let v = env["MOONBASE_LUA_MAX_INSTRUCTIONS"], let n = Int64(v) { c.jobs.maxInstructions = n }
        return c
    }
}
