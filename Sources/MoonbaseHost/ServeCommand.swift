import MoonbaseAPI
import MoonbaseCore
import MoonbaseHTTP
import MoonbaseLiveQuery

/// `moonbase serve`: HTTP, Cloud Code with hot reload, cron, accounting; graceful shutdown on
/// SIGINT/SIGTERM (stop accepting, finish in-flight requests, stop jobs, flush accounting,
/// checkpoint the WAL, exit 0).
enum ServeCommand {
    static let help = """
        usage: moonbase serve [--host H] [--port P] [--data DIR] [--functions DIR] [--cron DIR]
                              [--public-url URL] [--log-format text|json] [--workers N]
                              [--metrics-require-master] [--quota-monthly-requests N]
                              [--rate-limit-per-minute N] [--cors-origins LIST|*|none]
        environment (flags win): MOONBASE_HOST, MOONBASE_PORT, MOONBASE_DATA, MOONBASE_APP_ID,
          MOONBASE_MASTER_KEY, MOONBASE_REST_KEY, MOONBASE_PUBLIC_URL, MOONBASE_QUOTA_MONTHLY_REQUESTS,
          MOONBASE_RATE_LIMIT_PER_MINUTE, MOONBASE_ACCOUNTING=off, MOONBASE_LOGIN_MAX_FAILURES,
          MOONBASE_SESSION_LENGTH_SECONDS, MOONBASE_SESSION_LIFETIME_DAYS,
          MOONBASE_ACCESS_TOKEN_LIFETIME_SECONDS, MOONBASE_REFRESH_TOKEN_LIFETIME_DAYS,
          MOONBASE_SESSION_PURGE_SECONDS, MOONBASE_LUA_TIMEOUT_MS, MOONBASE_LUA_MAX_MEMORY_MB,
          MOONBASE_LUA_MAX_DB_OPS, MOONBASE_LUA_MAX_INSTRUCTIONS, MOONBASE_WORKERS, MOONBASE_IO_THREADS,
          MOONBASE_MAX_BODY_BYTES, MOONBASE_MAX_FILE_BYTES, MOONBASE_JOB_HISTORY, MOONBASE_LOG_FORMAT,
          MOONBASE_CORS_ORIGINS, MOONBASE_LUA_WRITER_HOLD_MS,
          MOONBASE_LUA_MAX_VM_MEMORY_MB, MOONBASE_MAX_RESPONSE_MB, MOONBASE_HTTP_ALLOW,
          MOONBASE_HTTP_MAX_REQUESTS (docs/operations.md says what each does)
        """

    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, base) = try Commands.parse(args,
            values: ["host", "port", "public-url", "log-format", "workers", "quota-monthly-requests", "rate-limit-per-minute", "cors-origins"],
            flags: ["metrics-require-master"], help: help) else { return 0 }
        var c = base
        if let v = a.value("host") { c.host = v }
        if let v = try a.int("port") { c.port = v }
        if let v = a.value("public-url") { c.publicURL = v }
        if let v = a.value("log-format") {
            guard let f = LogFormat(rawValue: v) else { throw UsageError("--log-format must be text or json") }
            c.logFormat = f
        }
        if let v = try a.int("workers") {
            guard v > 0 else { throw UsageError("--workers must be at least 1") }
            c.workers = v
        }
        if a.flag("metrics-require-master") { c.metricsRequireMaster = true }
        if let v = try a.int("quota-monthly-requests") { c.quotaMonthlyRequests = v }
        if let v = try a.int("rate-limit-per-minute") { c.rateLimitPerMinute = v }
        if let v = a.value("cors-origins") { c.corsOrigins = CORSPolicy.parse(v) }
        guard a.positionals.isEmpty else { throw UsageError("unexpected argument '\(a.positionals[0])'") }

        let host = try Host.build(c, serving: true)
        let s = host.services
        let server: HTTPServer
        let live = try LiveQueryServer(config: .fromEnvironment(), services: s, engine: ChangeHubEngine(hub: s.realtime.hub))
        do {
            var httpConfig = HTTPServerConfig(
                host: c.host, port: c.port, ioThreads: c.ioThreads, workers: c.workers,
                maxHeaderBytes: c.maxHeaderBytes, maxConnections: c.maxConnections,
                idleTimeoutSeconds: c.idleTimeoutSeconds)
            httpConfig.maxUpgradedConnections = live.config.maxConnections
            server = try HTTPServer(config: httpConfig, handler: host.api, upgrader: live)
            live.attach(server)
            try server.start()
        } catch {
            throw ParseError.internalError("cannot serve on \(c.host):\(c.port): \(error)")
        }
        s.usageFlusher?.start()
        // Expired sessions are deleted on a schedule, not only when their token is next used.
        s.jobs.scheduler.every(Int64(c.sessionPurgeSeconds) * 1000) { [auth = s.auth] in
            do throws(ParseError) {
                let n = try auth.purgeExpiredSessions()
                if n > 0 { Log.info("purged \(n) expired session(s)") }
            } catch {
                Log.warn("purging expired sessions failed: \(error.message)")
            }
        }
        s.realtime.start()
        s.jobs.scheduler.start()
        host.watcher?.start()
        Log.info("moonbase serving on http://\(c.host):\(server.port) (data \(c.dataDir), functions \(c.functionsDir), cron \(c.cronDir))")

        let sig = Signals.waitForTermination()
        Log.info("signal \(sig): shutting down")
        host.watcher?.stop()
        // WebSockets first: their `disconnect` triggers need the workers, and libmicrohttpd
        // must get its upgraded sockets back before it stops.
        live.shutdown()
        server.shutdown(graceMillis: c.shutdownGraceMs)
        s.realtime.stop()
        let failed = s.jobs.scheduler.shutdown(timeoutMs: Int64(c.shutdownGraceMs))
        if !failed.isEmpty { Log.warn("jobs still running at shutdown were marked failed: \(failed)") }
        s.usageFlusher?.shutdown()
        do { try s.database.checkpoint() } catch { Log.warn("WAL checkpoint failed: \(error.message)") }
        s.database.close()
        Log.info("stopped")
        return 0
    }
}
