/// Moonbase's standard `/metrics` families on a `Metrics` registry (issue 6: requests by route
/// and status, a latency histogram, units, Lua CPU, job runs by status, DB operations):
///
/// | name                                       | type      | labels          |
/// |--------------------------------------------|-----------|-----------------|
/// | `moonbase_http_requests_total`             | counter   | route, status   |
/// | `moonbase_http_request_duration_seconds`   | histogram | route, status   |
/// | `moonbase_http_bytes_total`                | counter   | direction (in/out) |
/// | `moonbase_usage_units_total`               | counter   | —               |
/// | `moonbase_usage_refused_total`             | counter   | —               |
/// | `moonbase_lua_cpu_seconds_total`           | counter   | —               |
/// | `moonbase_db_operations_total`             | counter   | op (read/write) |
/// | `moonbase_job_runs_total`                  | counter   | job, status     |
///
/// `route` is the matched pattern (`GET /hello/:id`, `POST /parse/classes/:className`) or
/// `unmatched`, never the raw path.
///
/// Concurrency: `Sendable`; one striped lock per `observeRequest` call.
public struct ServerMetrics: Sendable {
    public let registry: Metrics
    let requests: MetricCounter
    let duration: MetricHistogram
    let bytes: MetricCounter
    let units: MetricCounter
    let refused: MetricCounter
    let luaCPU: MetricCounter
    let dbOps: MetricCounter
    let jobRuns: MetricCounter

    public init(registry: Metrics = Metrics()) {
        self.registry = registry
        requests = registry.counter("moonbase_http_requests_total", help: "HTTP requests answered, by route pattern and status.",
                                    labels: ["route", "status"])
        duration = registry.histogram("moonbase_http_request_duration_seconds",
                                      help: "Time from request start to response, by route pattern and status.",
                                      labels: ["route", "status"])
        bytes = registry.counter("moonbase_http_bytes_total", help: "Request and response body bytes.", labels: ["direction"])
        units = registry.counter("moonbase_usage_units_total", help: "Request units charged to the app.")
        refused = registry.counter("moonbase_usage_refused_total", help: "Requests refused with 429 by a quota or rate limit.")
        luaCPU = registry.counter("moonbase_lua_cpu_seconds_total", help: "CPU time spent running Cloud Code.")
        dbOps = registry.counter("moonbase_db_operations_total", help: "Database operations by requests.", labels: ["op"])
        jobRuns = registry.counter("moonbase_job_runs_total", help: "Background job runs by final status.", labels: ["job", "status"])
    }

    /// Records one answered request: its status and latency, and (when the request was charged
    /// or refused) its usage. Free requests (health, metrics, 159 retries) pass `usage: nil`.
    public func observeRequest(route: String, status: Int, seconds: Double, usage: RequestUsage? = nil) {
        let statusText = Self.statusText(status)
        registry.update { table in
            requests.add(to: &table, [route, statusText], 1)
            duration.observe(in: &table, seconds, [route, statusText])
            guard let u = usage else { return }
            if u.refused { refused.add(to: &table, [], 1) } else { units.add(to: &table, [], 1) }
            bytes.add(to: &table, ["in"], Double(u.bytesIn))
            bytes.add(to: &table, ["out"], Double(u.bytesOut))
            luaCPU.add(to: &table, [], Double(u.luaCpuMicros) / 1_000_000)
            dbOps.add(to: &table, ["read"], Double(u.dbReads))
            dbOps.add(to: &table, ["write"], Double(u.dbWrites))
        }
    }

    /// Records a finished job run (`succeeded`, `failed`, `skipped`…), from cron or the REST API.
    public func observeJobRun(job: String, status: String) {
        jobRuns.inc([job, status])
    }

    /// The exposition text (see `Metrics.render`).
    public func render() -> String { registry.render() }

    /// Status codes as text, without allocating for the usual ones.
    private static let statusTexts: [String] = (0..<600).map { String($0) }

    static func statusText(_ status: Int) -> String {
        status >= 0 && status < statusTexts.count ? statusTexts[status] : String(status)
    }
}
