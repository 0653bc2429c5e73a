import MoonbaseAPI
import MoonbaseAuth
import MoonbaseCore
import MoonbaseCron
import MoonbaseHTTP
import MoonbaseLiveQuery
import MoonbaseQuota
import MoonbaseStore

/// `moonbase serve`: HTTP, Cloud Code with hot reload, cron, accounting; graceful shutdown on
/// SIGINT/SIGTERM (stop accepting, finish in-flight requests, stop jobs, flush accounting,
/// checkpoint the WAL, exit 0). Requests still running when the grace is over are answered
/// 503 and their workers abandoned; then the process exits at once with status 3.
enum ServeCommand {
    static let help = """
        usage: moonbase serve [--host H] [--port P] [--data DIR] [--database URL] [--functions DIR] [--cron DIR]
                              [--public-url URL] [--log-format text|json]
                              [--log-level debug|info|warn] [--workers N] [--max-workers N]
                              [--metrics-require-master] [--quota-monthly-requests N]
                              [--rate-limit-per-minute N] [--cors-origins LIST|*|none]
                              [--max-connections N] [--max-connections-per-ip N] [--header-timeout SECONDS]
        environment (flags win): every MOONBASE_* variable of docs/operations.md, among them
          MOONBASE_HOST, MOONBASE_PORT, MOONBASE_DATA, MOONBASE_DATABASE_URL, MOONBASE_APP_ID, MOONBASE_MASTER_KEY,
          MOONBASE_REST_KEY, MOONBASE_PUBLIC_URL, MOONBASE_QUOTA_MONTHLY_REQUESTS,
          MOONBASE_RATE_LIMIT_PER_MINUTE, MOONBASE_ACCOUNTING=off, MOONBASE_LUA_TIMEOUT_MS,
          MOONBASE_LUA_MAX_MEMORY_MB, MOONBASE_MAX_CONNECTIONS, MOONBASE_HEADER_TIMEOUT_SECONDS
        """

    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, base) = try Commands.parse(args,
            values: ["host", "port", "public-url", "log-format", "workers", "max-workers", "quota-monthly-requests", "rate-limit-per-minute",
                     "cors-origins", "log-level", "max-connections", "max-connections-per-ip", "header-timeout"],
            flags: ["metrics-require-master"], help: help) else { return 0 }
        var c = base
        if let v = a.value("host") { c.host = v }
        if let v = try a.int("port") { c.port = v }
        if let v = a.value("public-url") { c.publicURL = v }
        if let v = a.value("log-format") {
            guard let f = LogFormat(rawValue: v) else { throw UsageError("--log-format must be text or json") }
            c.logFormat = f
        }
        if let v = a.value("log-level") {
            guard let l = LogLevel(name: v), l != .error else { throw UsageError("--log-level must be debug, info or warn") }
            c.logLevel = l
        }
        if let v = try a.int("workers") {
            guard v > 0 else { throw UsageError("--workers must be at least 1") }
            c.workers = v
        }
        if let v = try a.int("max-workers") {
            guard v >= 0 else { throw UsageError("--max-workers must be 0 or more") }
            c.maxWorkers = v
        }
        if a.flag("metrics-require-master") { c.metricsRequireMaster = true }
        if let v = try a.int("quota-monthly-requests") { c.quotaMonthlyRequests = v }
        if let v = try a.int("rate-limit-per-minute") { c.rateLimitPerMinute = v }
        if let v = a.value("cors-origins") { c.corsOrigins = CORSPolicy.parse(v) }
        if let v = try a.int("max-connections") {
            guard v > 0 else { throw UsageError("--max-connections must be at least 1") }
            c.maxConnections = v
        }
        if let v = try a.int("max-connections-per-ip") {
            guard v >= 0 else { throw UsageError("--max-connections-per-ip must be 0 or more") }
            c.maxConnectionsPerIP = v
        }
        if let v = try a.int("header-timeout") {
            guard v >= 0 else { throw UsageError("--header-timeout must be 0 or more seconds") }
            c.headerTimeoutSeconds = v
        }
        guard a.positionals.isEmpty else { throw UsageError("unexpected argument '\(a.positionals[0])'") }
        try c.requireSharedMasterKey()

        let host = try Host.build(c, serving: true)
        // From here on log lines (one per request) go to a buffer written out by a background
        // thread every 100 ms, not with a system call each; flushed before exiting.
        LogOutput.startBuffering(intervalMillis: 100)
        defer { LogOutput.flush() }
        let s = host.services
        let server: HTTPServer
        let live = try LiveQueryServer(config: .fromEnvironment(), services: s, engine: ChangeHubEngine(hub: s.realtime.hub))
        do {
            var httpConfig = HTTPServerConfig(
                host: c.host, port: c.port, ioThreads: c.ioThreads, workers: c.workers,
                maxHeaderBytes: c.maxHeaderBytes, maxConnections: c.maxConnections,
                idleTimeoutSeconds: c.idleTimeoutSeconds, headerTimeoutSeconds: c.headerTimeoutSeconds,
                maxConnectionsPerIP: c.maxConnectionsPerIP, jobLimitMillis: c.luaTimeoutMs,
                stuckGraceMillis: c.workerStuckGraceMs)
            httpConfig.maxUpgradedConnections = live.config.maxConnections
            httpConfig.maxWorkers = c.effectiveMaxWorkers
            httpConfig.cpuBoundSlots = c.readSlots
            server = try HTTPServer(config: httpConfig, handler: host.api, upgrader: live)
            live.attach(server)
            // Runs a crash left `running` are failed before the first request can read them.
            s.jobs.scheduler.recoverInterruptedRuns()
            // Watching before serving: a file changed once clients can see the server reloads.
            host.watcher?.start()
            try server.start()
        } catch {
            throw ParseError.internalError("cannot serve on \(c.host):\(c.port): \(error)")
        }
        registerHardeningMetrics(s.metrics.registry, server)
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
        Log.info("moonbase serving on http://\(c.host):\(server.port) (data \(c.dataDir), functions \(c.functionsDir), cron \(c.cronDir))")

        let sig = Signals.waitForTermination()
        Log.info("signal \(sig): shutting down")
        // HTTP: the grace or a running call's own limit; then up to the grace for jobs; plus
        // 5 s for the rest. Past that the process exits with status 3 whatever still runs.
        Signals.exitDeadline(afterMillis: max(c.shutdownGraceMs, c.luaTimeoutMs) + c.shutdownGraceMs + 5_000, code: 3)
        host.watcher?.stop()
        // WebSockets first: their `disconnect` triggers need the workers, and libmicrohttpd
        // must get its upgraded sockets back before it stops.
        live.shutdown()
        let stuck = server.shutdown(graceMillis: c.shutdownGraceMs)
        s.realtime.stop()
        if stuck > 0 {
            // A stuck worker may hold the SQLite writer or run forever: waiting for jobs,
            // accounting or the WAL checkpoint could block the exit. Committed writes are
            // already durable (WAL); an uncommitted transaction rolls back on the next start.
            Log.warn("shutdown: \(stuck) worker(s) still running after the grace were abandoned; exiting with status 3 without flushing accounting or checkpointing")
            return 3
        }
        let failed = s.jobs.scheduler.shutdown(timeoutMs: Int64(c.shutdownGraceMs))
        if !failed.isEmpty { Log.warn("jobs still running at shutdown were marked failed: \(failed)") }
        s.usageFlusher?.shutdown()
        do { try s.store.checkpoint() } catch { Log.warn("WAL checkpoint failed: \(error.message)") }
        s.store.close()
        Log.info("stopped")
        return 0
    }

    /// Worker backstop and connection-guard figures on `/metrics`.
    static func registerHardeningMetrics(_ m: Metrics, _ server: HTTPServer) {
        m.gauge("moonbase_workers_busy", help: "Workers running a request.") {
            [MetricSample(value: Double(server.workerStatus.busy))]
        }
        m.gauge("moonbase_workers_stuck", help: "Abandoned worker threads still running a stuck request.") {
            [MetricSample(value: Double(server.workerStatus.stuck))]
        }
        m.counter("moonbase_workers_replaced_total", help: "Workers replaced after running past their limit plus the grace.") {
            [MetricSample(value: Double(server.workerStatus.replaced))]
        }
        m.gauge("moonbase_read_slots", help: "REST reads that may run at once (0: no limit).") {
            [MetricSample(value: Double(server.cpuSlots.slots))]
        }
        m.counter("moonbase_read_slot_waits_total", help: "REST reads queued while every read slot was taken.") {
            [MetricSample(value: Double(server.cpuSlots.waited))]
        }
        m.counter("moonbase_write_batches_total", help: "Batches of REST writes committed together (group commit).") {
            [MetricSample(value: Double(server.writeBatches.batches))]
        }
        m.counter("moonbase_write_batched_requests_total", help: "REST writes that went through a batch (divide by the batches for their mean size).") {
            [MetricSample(value: Double(server.writeBatches.requests))]
        }
        m.counter("moonbase_wal_frames_total", help: "Pages written to SQLite's write-ahead log.") {
            [MetricSample(value: Double(SQLiteDocumentStore.walWrites.frames))]
        }
        m.counter("moonbase_wal_writes_total", help: "Writes that carried them (a commit's pages go in one write of up to 124 KiB).") {
            [MetricSample(value: Double(SQLiteDocumentStore.walWrites.writes))]
        }
        m.counter("moonbase_subjournal_bytes_total", help: "Page copies kept in memory so that a savepoint or a statement can roll back alone.") {
            [MetricSample(value: Double(SQLiteDocumentStore.walWrites.subjournalBytes))]
        }
        m.counter("moonbase_http_header_deadline_cuts_total", help: "Connections closed for not completing a request head in time.") {
            [MetricSample(value: Double(server.headerDeadlineCuts))]
        }
        m.counter("moonbase_http_library_errors_total", help: "Malformed requests refused by libmicrohttpd (answered with a Parse body).") {
            [MetricSample(value: Double(HTTPServer.libraryErrorsRewritten))]
        }
        m.counter("moonbase_http_bad_content_length_total", help: "Connections closed for an unparseable Content-Length.") {
            [MetricSample(value: Double(HTTPServer.badContentLengthsClosed))]
        }
    }
}
