import Synchronization
extension Metrics {
    /// The registry in Prometheus text format 0.0.4 (`Content-Type: text/plain; version=0.0.4`):
    /// for each family in registration order a `# HELP` and `# TYPE` line, then its series sorted
    /// by label values; histograms as cumulative `_bucket{le=…}` lines ending in `+Inf`, then
    /// `_sum` and `_count`. Families with no series yet show only their HELP and TYPE lines.
    public func render() -> String {
        let defs = families.withLock { $0 }
        let table = merged()
        var byFamily = [[MetricSample]](repeating: [], count: defs.count)
        for (key, series) in table where key.family < defs.count {
            byFamily[key.family].append(MetricSample(labels: key.labels, value: series.value, count: series.count, buckets: series.buckets))
        }
        var out = ""
        out.reserveCapacity(256 * defs.count)
        for (id, f) in defs.enumerated() {
            out += "# HELP \(f.name) \(Self.escapeHelp(f.help))\n# TYPE \(f.name) \(f.kind.rawValue)\n"
            let samples = (f.sample?() ?? byFamily[id])
                .filter { $0.labels.count == f.labelNames.count }
                .sorted { $0.labels.lexicographicallyPrecedes($1.labels) }
            for s in samples {
                switch f.kind {
                case .counter, .gauge:
                    out += f.name + Self.labelSet(f.labelNames, s.labels) + " " + Self.format(s.value) + "\n"
                case .histogram:
                    var cumulative: UInt64 = 0
                    for (i, bound) in (f.buckets + [.infinity]).enumerated() {
                        cumulative &+= i < s.buckets.count ? s.buckets[i] : 0
                        out += f.name + "_bucket"
                            + Self.labelSet(f.labelNames + ["le"], s.labels + [Self.format(bound)])
                            + " " + String(cumulative) + "\n"
                    }
                    let labels = Self.labelSet(f.labelNames, s.labels)
                    out += f.name + "_sum" + labels + " " + Self.format(s.value) + "\n"
                    out += f.name + "_count" + labels + " " + String(s.count) + "\n"
                }
            }
        }
        return out
    }

    /// `{a="x",b="y"}`, or nothing when there are no labels.
    static func labelSet(_ names: [String], _ values: [String]) -> String {
        guard !names.isEmpty else { return "" }
        var s = "{"
        for (i, name) in names.enumerated() {
            if i > 0 { s += "," }
            s += name + "=\"" + escapeLabel(i < values.count ? values[i] : "") + "\""
        }
        return s + "}"
    }

    /// Label values escape backslash, double quote and line feed.
    static func escapeLabel(_ v: String) -> String {
        guard v.utf8.contains(where: { $0 == 92 || $0 == 34 || $0 == 10 }) else { return v }
        var out = ""
        for ch in v.unicodeScalars {
            switch ch {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(ch)
            }
        }
        return out
    }

    /// HELP text escapes backslash and line feed.
    static func escapeHelp(_ v: String) -> String {
        guard v.utf8.contains(where: { $0 == 92 || $0 == 10 }) else { return v }
        var out = ""
        for ch in v.unicodeScalars {
            switch ch {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(ch)
            }
        }
        return out
    }

    /// Integers without a fraction, other values in Swift's shortest round-trip form (which Go's
    /// `ParseFloat` reads), and `+Inf`, `-Inf`, `NaN`.
    static func format(_ v: Double) -> String {
        if v.isNaN { return "NaN" }
        if v.isInfinite { return v > 0 ? "+Inf" : "-Inf" }
        if v == v.rounded(), abs(v) < 1e15 { return String(Int64(v)) }
        return String(v)
    }
}
