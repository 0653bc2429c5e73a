import MoonbaseCore
import MoonbaseLua
import MoonbaseOutbound

#if canImport(Glibc)
import Glibc
#endif

/// Everything `moonbase serve` (and the other verbs) can be told, with their documented defaults.
/// Flags win over environment variables, which win over defaults.
public struct HostConfig: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    public var dataDir = "./data"
    /// `--database`, `MOONBASE_DATABASE_URL`: a `postgres://` URL to run on PostgreSQL (several
    /// hosts may share it); nil = SQLite in `dataDir`.
    public var databaseURL: String?
    public var functionsDir = "./functions"
    public var cronDir = "./cron"
    public var appId = "moonbase"
    public var masterKey: String?
    public var restKey: String?
    public var publicURL: String?
    public var logFormat: LogFormat = .text
    /// Lowest level logged (`--log-level`, `MOONBASE_LOG_LEVEL`); request lines are `info`.
    public var logLevel: LogLevel = .info
    public var workers = 2 * HostConfig.cores
    /// `--max-workers` / `MOONBASE_MAX_WORKERS`: the pool may grow to this many while every
    /// worker is on a long call and requests wait (0 = fixed at `workers`; nil = twice
    /// `workers`, so scripts spinning on every worker cannot hold back other requests).
    public var maxWorkers: Int?
    /// The pool's cap: `maxWorkers`, or twice `workers` when it is not set.
    public var effectiveMaxWorkers: Int { maxWorkers ?? 2 * workers }
    public var ioThreads = HostConfig.cores
    /// `MOONBASE_READ_SLOTS`: REST finds and gets of the SQLite store running at once at most
    /// (the others wait their turn in the queue, which other requests pass); one per core by
    /// default, so that reads do not slice the cores between them; 0 = no limit.
    public var readSlots = HostConfig.cores
    public var metricsRequireMaster = false
    public var quotaMonthlyRequests = 0
    public var rateLimitPerMinute = 0
    public var accounting = true
    public var loginMaxFailures = 10
    public var sessionLengthSeconds: Int64 = 365 * 24 * 3600
    /// How often the server deletes expired sessions.
    public var sessionPurgeSeconds = 3600
    public var accessTokenSeconds: Int64 = 3600
    public var refreshTokenSeconds: Int64 = 30 * 24 * 3600
    public var maxBodyBytes = 1 << 20
    public var maxFileBytes = 20 << 20
    public var maxHeaderBytes = 16 << 10
    public var maxConnections = 1024
    public var idleTimeoutSeconds = 30
    /// Seconds a client has to complete a request's head (0 = idle timeout only).
    public var headerTimeoutSeconds = 10
    /// Connections per client address (0 = three quarters of `maxConnections`).
    public var maxConnectionsPerIP = 0
    public var luaTimeoutMs = 10_000
    public var luaMaxMemoryMB = 64
    public var luaMaxDbOps = 10_000
    public var luaMaxInstructions = 0
    public var luaWriterHoldMs = Int(LuaLimits.defaultWriterHoldMs)
    public var luaMaxVMMemoryMB = Int(LuaLimits.defaultVMMemoryMB)
    public var maxResponseMB = Int(LuaLimits.defaultResultMB)
    public var jobHistoryPerJob = 100
    /// FOR TESTS ONLY (`MOONBASE_TEST_ONLY_CRON_MINUTE_MS`): how long one minute of a cron
    /// expression lasts; 1000 makes each cron minute a second, so tests see ticks in seconds.
    public var testOnlyCronMinuteMs: Int64 = 60_000
    public var shutdownGraceMs = 10_000
    /// `MOONBASE_HTTP_ALLOW`: addresses and CIDR blocks `http.request` may reach although they
    /// are loopback, private, link-local… (comma-separated).
    public var httpAllow: String?
    /// `MOONBASE_HTTP_MAX_REQUESTS`: `http.request` calls allowed per Cloud Code call.
    public var httpMaxRequestsPerCall = 20
    /// Origins browsers may call the API from (`*` = any; empty = no CORS headers).
    public var corsOrigins = ["*"]
    /// How long past its call's limit a worker may run before it is replaced as stuck.
    public var workerStuckGraceMs = 5_000

    public init() {}

    public static var cores: Int { Processors.online }

    /// Reads the `MOONBASE_*` environment variables over the defaults: the one place the server
    /// reads its environment (each variable is listed in docs/operations.md and checked by an e2e test).
    public static func fromEnvironment() throws(UsageError) -> HostConfig {
        var c = HostConfig()
        func env(_ name: String) -> String? {
            guard let p = getenv(name) else { return nil }
            let s = String(cString: p)
            return s.isEmpty ? nil : s
        }
        func int(_ name: String) throws(UsageError) -> Int? {
            guard let s = env(name) else { return nil }
            guard let v = Int(s), v >= 0 else { throw UsageError("\(name) must be a non-negative integer, got '\(s)'") }
            return v
        }
        if let v = env("MOONBASE_HOST") { c.host = v }
        if let v = env("MOONBASE_HTTP_ALLOW") {
            do throws(AddressPolicyError) {
                _ = try AddressPolicy(allow: v)
            } catch {
                throw UsageError("MOONBASE_HTTP_ALLOW: '\(error.entry)' is not an address or CIDR block")
            }
            c.httpAllow = v
        }
        if let v = try int("MOONBASE_HTTP_MAX_REQUESTS") { c.httpMaxRequestsPerCall = v }
        if let v = try int("MOONBASE_PORT") { c.port = v }
        if let v = env("MOONBASE_DATA") { c.dataDir = v }
        if let v = env("MOONBASE_DATABASE_URL") { c.databaseURL = try databaseURL(v, from: "MOONBASE_DATABASE_URL") }
        if let v = env("MOONBASE_APP_ID") { c.appId = v }
        c.masterKey = env("MOONBASE_MASTER_KEY")
        c.restKey = env("MOONBASE_REST_KEY")
        if let v = env("MOONBASE_PUBLIC_URL") { c.publicURL = v }
        if let v = try int("MOONBASE_QUOTA_MONTHLY_REQUESTS") { c.quotaMonthlyRequests = v }
        if let v = try int("MOONBASE_RATE_LIMIT_PER_MINUTE") { c.rateLimitPerMinute = v }
        if let v = env("MOONBASE_ACCOUNTING") { c.accounting = !(v == "off" || v == "0" || v == "false") }
        if let v = try int("MOONBASE_LOGIN_MAX_FAILURES") { c.loginMaxFailures = v }
        func positive(_ name: String) throws(UsageError) -> Int64? {
            guard let v = try int(name) else { return nil }
            guard v > 0 else { throw UsageError("\(name) must be at least 1, got '\(v)'") }
            return Int64(v)
        }
        if let v = try positive("MOONBASE_SESSION_LIFETIME_DAYS") { c.sessionLengthSeconds = v * 24 * 3600 }
        if let v = try positive("MOONBASE_SESSION_LENGTH_SECONDS") { c.sessionLengthSeconds = v }
        if let v = try positive("MOONBASE_ACCESS_TOKEN_LIFETIME_SECONDS") { c.accessTokenSeconds = v }
        if let v = try positive("MOONBASE_REFRESH_TOKEN_LIFETIME_DAYS") { c.refreshTokenSeconds = v * 24 * 3600 }
        if let v = try int("MOONBASE_SESSION_PURGE_SECONDS"), v > 0 { c.sessionPurgeSeconds = v }
        if let v = try int("MOONBASE_LUA_TIMEOUT_MS") { c.luaTimeoutMs = v }
        if let v = try int("MOONBASE_LUA_MAX_MEMORY_MB") { c.luaMaxMemoryMB = v }
        if let v = try int("MOONBASE_LUA_MAX_DB_OPS") { c.luaMaxDbOps = v }
        if let v = try int("MOONBASE_LUA_MAX_INSTRUCTIONS") { c.luaMaxInstructions = v }
        if let v = try int("MOONBASE_LUA_WRITER_HOLD_MS") { c.luaWriterHoldMs = v }
        if let v = try int("MOONBASE_LUA_MAX_VM_MEMORY_MB") { c.luaMaxVMMemoryMB = v }
        if let v = try int("MOONBASE_MAX_RESPONSE_MB") { c.maxResponseMB = v }
        if let v = try int("MOONBASE_WORKERS"), v > 0 { c.workers = v }
        if let v = try int("MOONBASE_MAX_WORKERS"), v >= 0 { c.maxWorkers = v }
        if let v = try int("MOONBASE_IO_THREADS"), v > 0 { c.ioThreads = v }
        if let v = try int("MOONBASE_READ_SLOTS"), v >= 0 { c.readSlots = v }
        if let v = try int("MOONBASE_MAX_BODY_BYTES"), v > 0 { c.maxBodyBytes = v }
        if let v = try int("MOONBASE_MAX_FILE_BYTES"), v > 0 { c.maxFileBytes = v }
        if let v = try int("MOONBASE_JOB_HISTORY"), v > 0 { c.jobHistoryPerJob = v }
        if let v = try int("MOONBASE_TEST_ONLY_CRON_MINUTE_MS") {
            guard v >= 100, v <= 60_000, 60_000 % v == 0 else {
                throw UsageError("MOONBASE_TEST_ONLY_CRON_MINUTE_MS must divide 60000 (100 to 60000), got '\(v)'")
            }
            c.testOnlyCronMinuteMs = Int64(v)
        }
        if let v = env("MOONBASE_CORS_ORIGINS") { c.corsOrigins = CORSPolicy.parse(v) }
        if let v = try int("MOONBASE_WORKER_STUCK_GRACE_MS") { c.workerStuckGraceMs = v }
        if let v = try int("MOONBASE_SHUTDOWN_GRACE_MS") { c.shutdownGraceMs = v }
        if let v = try int("MOONBASE_MAX_CONNECTIONS"), v > 0 { c.maxConnections = v }
        if let v = try int("MOONBASE_MAX_CONNECTIONS_PER_IP") { c.maxConnectionsPerIP = v }
        if let v = try int("MOONBASE_HEADER_TIMEOUT_SECONDS") { c.headerTimeoutSeconds = v }
        if let v = try int("MOONBASE_IDLE_TIMEOUT_SECONDS"), v > 0 { c.idleTimeoutSeconds = v }
        if let v = try int("MOONBASE_MAX_HEADER_BYTES"), v >= 1024 { c.maxHeaderBytes = v }
        if let v = env("MOONBASE_LOG_FORMAT") {
            guard let f = LogFormat(rawValue: v) else { throw UsageError("MOONBASE_LOG_FORMAT must be text or json") }
            c.logFormat = f
        }
        if let v = env("MOONBASE_LOG_LEVEL") {
            guard let l = LogLevel(name: v), l != .error else {
                throw UsageError("MOONBASE_LOG_LEVEL must be debug, info or warn")
            }
            c.logLevel = l
        }
        return c
    }

    /// `value` when it is a PostgreSQL URL (`postgres://` or `postgresql://`, the forms libpq
    /// reads), else a usage error naming `source`.
    public static func databaseURL(_ value: String, from source: String) throws(UsageError) -> String {
        guard value.hasPrefix("postgres://") || value.hasPrefix("postgresql://") else {
            throw UsageError("\(source) must be a postgres:// URL (SQLite needs none: it lives in the data directory)")
        }
        return value
    }

    /// Hosts sharing a database must share the master key, so none may make its own.
    /// - Throws: when `databaseURL` is set and `MOONBASE_MASTER_KEY` is not.
    public func requireSharedMasterKey() throws(UsageError) {
        guard databaseURL != nil, masterKey == nil else { return }
        throw UsageError("MOONBASE_MASTER_KEY must be set with --database / MOONBASE_DATABASE_URL: every host on one database needs the same master key")
    }

    /// The SQLite file inside the data dir.
    public var databasePath: String { dataDir + "/moonbase.sqlite" }
    public var filesDir: String { dataDir + "/files" }
    public var masterKeyPath: String { dataDir + "/master.key" }
}

/// A command-line usage error: exit code 2.
public struct UsageError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
