import MoonbaseCore
import Synchronization
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
/// Concurrency: `Sendable`. `observe` takes one uncontended lock (the calling thread's
/// stripe) and does one dictionary update keyed by (route, status) plus plain additions; the
/// registry reads the stripes only when rendering.
public struct ServerMetrics: Sendable {
    public let registry: Metrics
    let stripes: [Stripe<ServerTable>]
    let mask: Int
    let bounds: [Double]
    let jobRuns: MetricCounter

    public init(registry: Metrics = Metrics(), stripes requested: Int = 32, latencyBuckets: [Double] = Metrics.latencyBuckets) {
        let n = stripeCount(requested)
        let stripes = (0..<n).map { _ in Stripe(ServerTable()) }
        let bounds = latencyBuckets.filter { $0.isFinite }.sorted()
        self.registry = registry
        self.stripes = stripes
        self.mask = n - 1
        self.bounds = bounds
        @Sendable func merged() -> ServerTable { ServerTable.merge(stripes.map { s in s.state.withLock { $0 } }) }
        registry.counter("moonbase_http_requests_total", help: "HTTP requests answered, by route pattern and status.",
                         labels: ["route", "status"]) {
            merged().routes.map { MetricSample(labels: [$0.key.route, ServerMetrics.statusText($0.key.status)], value: Double($0.value.count)) }
        }
        registry.histogram("moonbase_http_request_duration_seconds",
                           help: "Time from request start to response, by route pattern and status.",
                           labels: ["route", "status"], buckets: bounds) {
            merged().routes.map {
                MetricSample(labels: [$0.key.route, ServerMetrics.statusText($0.key.status)], value: $0.value.sum,
                             count: $0.value.count, buckets: $0.value.buckets)
            }
        }
        registry.counter("moonbase_http_bytes_total", help: "Request and response body bytes of charged requests.",
                         labels: ["direction"]) {
            let t = merged().totals
            return [MetricSample(labels: ["in"], value: Double(t.bytesIn)), MetricSample(labels: ["out"], value: Double(t.bytesOut))]
        }
        registry.counter("moonbase_usage_units_total", help: "Request units charged to the app.") {
            [MetricSample(value: Double(merged().totals.units))]
        }
        registry.counter("moonbase_usage_refused_total", help: "Requests refused with 429 by a quota or rate limit.") {
            [MetricSample(value: Double(merged().totals.refused))]
        }
        registry.counter("moonbase_lua_cpu_seconds_total", help: "CPU time spent running Cloud Code.") {
            [MetricSample(value: Double(merged().totals.luaCpuMicros) / 1_000_000)]
        }
        registry.counter("moonbase_db_operations_total", help: "Database operations by requests.", labels: ["op"]) {
            let t = merged().totals
            return [MetricSample(labels: ["read"], value: Double(t.dbReads)), MetricSample(labels: ["write"], value: Double(t.dbWrites))]
        }
        jobRuns = registry.counter("moonbase_job_runs_total", help: "Background job runs by final status.", labels: ["job", "status"])
    }

    /// Records one answered request: its status and latency, and (when the request was charged
    /// or refused) its usage. Free requests (health, metrics, 159 retries) pass `usage: nil`.
    public func observe(route: String, status: Int, seconds: Double, usage: RequestUsage? = nil) {
        var bucket = 0
        while bucket < bounds.count && seconds > bounds[bucket] { bucket += 1 }
        let width = bounds.count + 1
        stripes[threadSlot.value.index & mask].state.withLock { t in
            t.routes[RouteKey(route: route, status: status), default: RouteSeries(buckets: width)]
                .observe(seconds, bucket: bucket)
            if let u = usage { t.totals.add(u.counts) }
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

struct RouteKey: Hashable, Sendable {
    let route: String
    let status: Int
}

struct RouteSeries: Sendable {
    var count: UInt64 = 0
    var sum: Double = 0
    var buckets: [UInt64]

    init(buckets: Int) { self.buckets = [UInt64](repeating: 0, count: buckets) }

    @inline(__always)
    mutating func observe(_ v: Double, bucket: Int) {
        count &+= 1
        if v.isFinite { sum += v }
        buckets[bucket] &+= 1
    }

    mutating func merge(_ o: RouteSeries) {
        count &+= o.count
        sum += o.sum
        for i in o.buckets.indices where i < buckets.count { buckets[i] &+= o.buckets[i] }
    }
}

/// One stripe of `ServerMetrics`.
struct ServerTable: Sendable {
    var routes: [RouteKey: RouteSeries] = [:]
    /// Totals of charged and refused requests: the same cost vector as the usage rows.
    var totals = UsageCounts()

    static func merge(_ tables: [ServerTable]) -> ServerTable {
        var out = ServerTable()
        for t in tables {
            out.totals.add(t.totals)
            for (k, v) in t.routes {
                if out.routes[k] == nil { out.routes[k] = v } else { out.routes[k]!.merge(v) }
            }
        }
        return out
    }
}
