import MoonbaseCore
import Synchronization

/// A small Prometheus registry for `/metrics`: counters, histograms with fixed buckets, and
/// gauges sampled at render time, rendered in the text exposition format 0.0.4.
///
/// ```swift
/// let metrics = Metrics()
/// let requests = metrics.counter("moonbase_http_requests_total", help: "HTTP requests.", labels: ["route", "status"])
/// requests.inc(["GET /hello", "200"])
/// print(metrics.render())
/// ```
///
/// Label values must come from a bounded set (route *patterns*, status codes, job names), never
/// from raw paths or user input: each distinct combination is a series kept for the process's life.
///
/// Concurrency: `Sendable`. Updates go to the calling thread's lock stripe (uncontended on the
/// hot path, like `UsageAggregator`); `render` visits every stripe and sums. Registration takes a
/// registry lock and is meant for start-up.
public final class Metrics: Sendable {
    /// Metric kinds, as written on `# TYPE` lines.
    enum Kind: String, Sendable { case counter, gauge, histogram }

    struct Family: Sendable {
        let name: String
        let help: String
        let kind: Kind
        let labelNames: [String]
        let buckets: [Double]
        let sample: (@Sendable () -> [MetricSample])?
    }

    struct SeriesKey: Hashable, Sendable {
        let family: Int
        let labels: [String]
    }

    /// Counter value, or a histogram's sum, count and per-bucket (non-cumulative) counts.
    struct Series: Sendable {
        var value: Double = 0
        var count: UInt64 = 0
        var buckets: [UInt64] = []
    }

    typealias Table = [SeriesKey: Series]

    let families = Mutex<[Family]>([])
    private let stripes: [Stripe<Table>]
    private let mask: Int

    /// - Parameter stripes: lock stripes (rounded up to a power of two); at least the number of
    ///   request threads keeps updates uncontended.
    public init(stripes requested: Int = 32) {
        let n = stripeCount(requested)
        stripes = (0..<n).map { _ in Stripe([:]) }
        mask = n - 1
    }

    /// Registers (or returns the already registered) counter `name`.
    public func counter(_ name: String, help: String, labels: [String] = []) -> MetricCounter {
        MetricCounter(metrics: self, id: register(Family(name: name, help: help, kind: .counter, labelNames: labels,
                                                         buckets: [], sample: nil)), labelCount: labels.count)
    }

    /// Registers a histogram with fixed upper bounds `buckets` (sorted ascending; `+Inf` is implied).
    public func histogram(_ name: String, help: String, labels: [String] = [],
                          buckets: [Double] = Metrics.latencyBuckets) -> MetricHistogram {
        let bounds = buckets.filter { $0.isFinite }.sorted()
        let id = register(Family(name: name, help: help, kind: .histogram, labelNames: labels, buckets: bounds, sample: nil))
        return MetricHistogram(metrics: self, id: id, labelCount: labels.count, bounds: bounds)
    }

    /// Registers a gauge whose series are read from `sample` at each render (queue depths,
    /// connections, pending usage rows). `sample` must be cheap and must not call `render`.
    public func gauge(_ name: String, help: String, labels: [String] = [],
                      sample: @escaping @Sendable () -> [MetricSample]) {
        _ = register(Family(name: name, help: help, kind: .gauge, labelNames: labels, buckets: [], sample: sample))
    }

    /// Registers a counter whose series are read from `sample` at each render, for components that
    /// keep their own cheaper counters (`ServerMetrics`). Values must never decrease.
    public func counter(_ name: String, help: String, labels: [String] = [],
                        sample: @escaping @Sendable () -> [MetricSample]) {
        _ = register(Family(name: name, help: help, kind: .counter, labelNames: labels, buckets: [], sample: sample))
    }

    /// Registers a histogram whose series are read from `sample` at each render; each sample's
    /// `buckets` has one (non-cumulative) count per bound in `buckets` plus one for `+Inf`.
    public func histogram(_ name: String, help: String, labels: [String] = [], buckets: [Double],
                          sample: @escaping @Sendable () -> [MetricSample]) {
        _ = register(Family(name: name, help: help, kind: .histogram, labelNames: labels,
                            buckets: buckets.filter { $0.isFinite }.sorted(), sample: sample))
    }

    /// Latency buckets in seconds, from 0.5 ms to 10 s.
    public static let latencyBuckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    private func register(_ family: Family) -> Int {
        precondition(Self.isValidName(family.name), "invalid metric name \(family.name)")
        precondition(family.labelNames.allSatisfy { Self.isValidName($0) && !$0.hasPrefix("__") && $0 != "le" },
                     "invalid label names \(family.labelNames)")
        return families.withLock { list in
            if let i = list.firstIndex(where: { $0.name == family.name }) {
                precondition(list[i].kind == family.kind && list[i].labelNames == family.labelNames,
                             "metric \(family.name) registered twice with different shapes")
                return i
            }
            list.append(family)
            return list.count - 1
        }
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
    static func isValidName(_ s: String) -> Bool {
        guard let first = s.utf8.first else { return false }
        func letter(_ c: UInt8) -> Bool { (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 95 || c == 58 }
        return letter(first) && s.utf8.allSatisfy { letter($0) || ($0 >= 48 && $0 <= 57) }
    }

    /// Runs `body` on this thread's stripe under its lock (several updates for one lock).
    @inline(__always)
    func update<R>(_ body: (inout Table) -> R) -> R {
        stripes[threadSlot.value.index & mask].state.withLock { body(&$0) }
    }

    /// A copy of every stripe summed.
    func merged() -> Table {
        var out: Table = [:]
        for s in stripes {
            let t = s.state.withLock { $0 }
            for (key, series) in t {
                out[key, default: Series(buckets: [UInt64](repeating: 0, count: series.buckets.count))].merge(series)
            }
        }
        return out
    }
}

extension Metrics.Series {
    mutating func merge(_ other: Metrics.Series) {
        value += other.value
        count &+= other.count
        if buckets.count < other.buckets.count { buckets += [UInt64](repeating: 0, count: other.buckets.count - buckets.count) }
        for i in other.buckets.indices { buckets[i] &+= other.buckets[i] }
    }
}

/// A counter family handle (cheap to copy; keep it in a `let`).
public struct MetricCounter: Sendable {
    let metrics: Metrics
    let id: Int
    let labelCount: Int

    /// Adds `amount` (≥ 0; counters never go down) to the series with these label values.
    public func inc(_ labels: [String] = [], by amount: Double = 1) {
        precondition(labels.count == labelCount, "label values do not match the label names")
        guard amount > 0 else { return }
        metrics.update { $0[Metrics.SeriesKey(family: id, labels: labels), default: Metrics.Series()].value += amount }
    }

    func add(to table: inout Metrics.Table, _ labels: [String], _ amount: Double) {
        guard amount > 0 else { return }
        table[Metrics.SeriesKey(family: id, labels: labels), default: Metrics.Series()].value += amount
    }
}

/// A histogram family handle.
public struct MetricHistogram: Sendable {
    let metrics: Metrics
    let id: Int
    let labelCount: Int
    let bounds: [Double]

    /// Records one observation (e.g. a latency in seconds).
    public func observe(_ value: Double, labels: [String] = []) {
        precondition(labels.count == labelCount, "label values do not match the label names")
        metrics.update { observe(in: &$0, value, labels) }
    }

    func observe(in table: inout Metrics.Table, _ value: Double, _ labels: [String]) {
        guard !value.isNaN else { return }
        let key = Metrics.SeriesKey(family: id, labels: labels)
        var i = 0
        while i < bounds.count && value > bounds[i] { i += 1 }
        let n = bounds.count + 1
        table[key, default: Metrics.Series(buckets: [UInt64](repeating: 0, count: n))].observe(value, bucket: i)
    }
}

extension Metrics.Series {
    @inline(__always)
    mutating func observe(_ v: Double, bucket: Int) {
        value += v
        count &+= 1
        buckets[bucket] &+= 1
    }
}

/// One series as read by a sampled family: a counter or gauge value, or a histogram's sum, count
/// and per-bucket counts.
public struct MetricSample: Sendable {
    public var labels: [String]
    /// The counter or gauge value, or the histogram's sum.
    public var value: Double
    /// Histograms: number of observations.
    public var count: UInt64
    /// Histograms: observations per bucket (not cumulative), one per bound plus one for `+Inf`.
    public var buckets: [UInt64]

    public init(labels: [String] = [], value: Double, count: UInt64 = 0, buckets: [UInt64] = []) {
        self.labels = labels
        self.value = value
        self.count = count
        self.buckets = buckets
    }
}
