import Foundation
import Testing

@testable import MoonbaseQuota

/// A strict reader for the Prometheus text format 0.0.4 line grammar, enough to prove our output
/// parses: `# HELP name text`, `# TYPE name kind`, and samples
/// `name{label="value",…} number` with `\\`, `\"` and `\n` escapes in label values.
struct Exposition {
    struct Sample: Hashable {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    var help: [String: String] = [:]
    var types: [String: String] = [:]
    var samples: [Sample] = []

    enum Failure: Error, CustomStringConvertible {
        case bad(line: Int, String)
        var description: String { if case .bad(let l, let m) = self { return "line \(l): \(m)" }; return "" }
    }

    init(_ text: String) throws {
        guard text.isEmpty || text.hasSuffix("\n") else { throw Failure.bad(line: 0, "no final newline") }
        for (n, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = String(raw)
            if line.isEmpty { continue }
            if line.hasPrefix("# HELP ") || line.hasPrefix("# TYPE ") {
                let rest = line.dropFirst(7)
                guard let space = rest.firstIndex(of: " ") else { throw Failure.bad(line: n, "no text") }
                let name = String(rest[..<space]), text = String(rest[rest.index(after: space)...])
                guard Self.isName(name) else { throw Failure.bad(line: n, "bad name \(name)") }
                if line.hasPrefix("# HELP ") {
                    guard help[name] == nil else { throw Failure.bad(line: n, "second HELP") }
                    help[name] = text
                } else {
                    guard ["counter", "gauge", "histogram", "summary", "untyped"].contains(text), types[name] == nil,
                          !samples.contains(where: { Self.family($0.name, types) == name })
                    else { throw Failure.bad(line: n, "bad TYPE") }
                    types[name] = text
                }
                continue
            }
            if line.hasPrefix("#") { continue }
            samples.append(try Self.sample(line, n))
        }
        for s in samples where Self.family(s.name, types) == nil { throw Failure.bad(line: 0, "\(s.name) has no TYPE") }
    }

    static func isName(_ s: String) -> Bool {
        guard let f = s.unicodeScalars.first, f.properties.isAlphabetic || f == "_" || f == ":" else { return false }
        return s.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_" || $0 == ":") }
    }

    /// The declared family a sample belongs to (`x_bucket` → `x` for histograms).
    static func family(_ name: String, _ types: [String: String]) -> String? {
        if types[name] != nil { return name }
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            let base = String(name.dropLast(suffix.count))
            if types[base] == "histogram" || types[base] == "summary" { return base }
        }
        return nil
    }

    static func sample(_ line: String, _ n: Int) throws -> Sample {
        let c = Array(line.unicodeScalars)
        var i = 0
        var name = ""
        while i < c.count, c[i] != "{", c[i] != " " { name.unicodeScalars.append(c[i]); i += 1 }
        guard isName(name) else { throw Failure.bad(line: n, "bad metric name \(name)") }
        var labels: [String: String] = [:]
        if i < c.count, c[i] == "{" {
            i += 1
            while i < c.count, c[i] != "}" {
                var key = ""
                while i < c.count, c[i] != "=" { key.unicodeScalars.append(c[i]); i += 1 }
                guard isName(key), i + 1 < c.count, c[i + 1] == "\"" else { throw Failure.bad(line: n, "bad label \(key)") }
                i += 2
                var value = ""
                while i < c.count, c[i] != "\"" {
                    if c[i] == "\\" {
                        guard i + 1 < c.count else { throw Failure.bad(line: n, "dangling escape") }
                        switch c[i + 1] {
                        case "\\": value += "\\"
                        case "\"": value += "\""
                        case "n": value += "\n"
                        default: throw Failure.bad(line: n, "bad escape")
                        }
                        i += 2
                    } else { value.unicodeScalars.append(c[i]); i += 1 }
                }
                guard i < c.count, labels[key] == nil else { throw Failure.bad(line: n, "unterminated or repeated label") }
                labels[key] = value
                i += 1
                if i < c.count, c[i] == "," { i += 1 }
            }
            guard i < c.count else { throw Failure.bad(line: n, "unterminated labels") }
            i += 1
        }
        guard i < c.count, c[i] == " " else { throw Failure.bad(line: n, "no value") }
        let fields = String(String.UnicodeScalarView(c[(i + 1)...])).split(separator: " ")
        guard fields.count == 1 || (fields.count == 2 && Int64(fields[1]) != nil) else { throw Failure.bad(line: n, "bad value") }
        let text = String(fields[0])
        let value: Double
        switch text {
        case "+Inf": value = .infinity
        case "-Inf": value = -.infinity
        case "NaN": value = .nan
        default:
            guard let v = Double(text) else { throw Failure.bad(line: n, "bad number \(text)") }
            value = v
        }
        return Sample(name: name, labels: labels, value: value)
    }

    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }
}

@Suite("Metrics: Prometheus text exposition", .timeLimit(.minutes(1)))
struct MetricsTests {
    @Test func countersHistogramsAndGaugesParse() throws {
        let m = Metrics()
        let c = m.counter("test_requests_total", help: "Requests.\nSecond line with \\ backslash.", labels: ["route", "status"])
        c.inc(["GET /hello", "200"])
        c.inc(["GET /hello", "200"], by: 2)
        c.inc(["POST /a \"quoted\"\\path\nnext", "500"])
        c.inc(["GET /hello", "404"], by: 0)  // no series for a zero increment
        let h = m.histogram("test_latency_seconds", help: "Latency.", labels: ["route"], buckets: [0.001, 0.01, 0.1])
        for v in [0.0005, 0.001, 0.002, 0.05, 0.5, 3] { h.observe(v, labels: ["GET /hello"]) }
        m.gauge("test_connections", help: "Open connections.") { [MetricSample(value: 7)] }
        _ = m.counter("test_unused_total", help: "Never incremented.")

        let text = m.render()
        let e = try Exposition(text)
        #expect(e.types == ["test_requests_total": "counter", "test_latency_seconds": "histogram",
                            "test_connections": "gauge", "test_unused_total": "counter"])
        #expect(e.help["test_requests_total"] == "Requests.\\nSecond line with \\\\ backslash.")
        #expect(e.value("test_requests_total", ["route": "GET /hello", "status": "200"]) == 3)
        #expect(e.value("test_requests_total", ["route": "POST /a \"quoted\"\\path\nnext", "status": "500"]) == 1)
        #expect(e.value("test_requests_total", ["route": "GET /hello", "status": "404"]) == nil)
        let route = ["route": "GET /hello"]
        let buckets = ["0.001", "0.01", "0.1", "+Inf"].map { e.value("test_latency_seconds_bucket", route.merging(["le": $0]) { a, _ in a }) }
        #expect(buckets == [2, 3, 4, 6])
        #expect(e.value("test_latency_seconds_count", route) == 6)
        #expect(abs((e.value("test_latency_seconds_sum", route) ?? 0) - 3.5535) < 1e-9)
        #expect(e.value("test_connections") == 7)
        #expect(text.contains("# TYPE test_unused_total counter\n"))
    }

    @Test func concurrentIncrementsAreExact() throws {
        let m = Metrics()
        let c = m.counter("test_hits_total", help: "Hits.", labels: ["route"])
        let h = m.histogram("test_seconds", help: "Seconds.")
        onThreads(8) { t in
            for i in 0..<10_000 {
                c.inc([t % 2 == 0 ? "even" : "odd"])
                h.observe(Double(i % 3) * 0.001)
            }
        }
        let e = try Exposition(m.render())
        #expect(e.value("test_hits_total", ["route": "even"]) == 40_000)
        #expect(e.value("test_hits_total", ["route": "odd"]) == 40_000)
        #expect(e.value("test_seconds_count") == 80_000)
        #expect(e.value("test_seconds_bucket", ["le": "+Inf"]) == 80_000)
    }

    @Test func serverMetricsRecordRequestsAndUsage() throws {
        let sm = ServerMetrics()
        let usage = RequestUsage(account: .user("u"), target: .function("stats"), dbReads: 200, dbWrites: 5,
                                 luaCpuMicros: 1_500, wallMicros: 3_000, bytesIn: 40, bytesOut: 900)
        sm.observe(route: "POST /parse/functions/:name", status: 200, seconds: 0.003, usage: usage)
        var refused = usage
        refused.refused = true
        sm.observe(route: "POST /parse/functions/:name", status: 429, seconds: 0.0001, usage: refused)
        sm.observe(route: "GET /parse/health", status: 200, seconds: 0.00002)
        sm.observeJobRun(job: "cleanup", status: "succeeded")
        let e = try Exposition(sm.render())
        #expect(e.value("moonbase_http_requests_total", ["route": "POST /parse/functions/:name", "status": "429"]) == 1)
        #expect(e.value("moonbase_http_request_duration_seconds_count", ["route": "GET /parse/health", "status": "200"]) == 1)
        #expect(e.value("moonbase_usage_units_total") == 1)
        #expect(e.value("moonbase_usage_refused_total") == 1)
        #expect(e.value("moonbase_db_operations_total", ["op": "read"]) == 400)
        #expect(e.value("moonbase_lua_cpu_seconds_total") == 0.003)
        #expect(e.value("moonbase_http_bytes_total", ["direction": "out"]) == 1_800)
        #expect(e.value("moonbase_job_runs_total", ["job": "cleanup", "status": "succeeded"]) == 1)
    }

    @Test func numberFormatting() {
        #expect(Metrics.format(3) == "3")
        #expect(Metrics.format(0.0025) == "0.0025")
        #expect(Metrics.format(.infinity) == "+Inf")
        #expect(Metrics.format(-.infinity) == "-Inf")
        #expect(Metrics.format(.nan) == "NaN")
        #expect(Double(Metrics.format(1e-7)) == 1e-7)
        #expect(Metrics.isValidName("a_b:c1") && !Metrics.isValidName("1abc") && !Metrics.isValidName("a-b"))
    }
}
