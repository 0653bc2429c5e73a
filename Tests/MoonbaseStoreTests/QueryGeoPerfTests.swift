import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Testing
@testable import MoonbaseStore

/// Timing loop for the W3/W3s/W5 budgets (measured by make bench), not a timed test: it prints figures and
/// only checks that the plans agree. Opt-in (it seeds 100k–1M rows):
/// `MOONBASE_QUERY_PERF=1 [MOONBASE_QUERY_PERF_ROWS=1000000] swift test --filter QueryGeoPerfTests`.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["MOONBASE_QUERY_PERF"] == "1"))
struct QueryGeoPerfTests {
    @Test(.timeLimit(.minutes(10))) func geoTimings() throws {
        let rows = Int(ProcessInfo.processInfo.environment["MOONBASE_QUERY_PERF_ROWS"] ?? "") ?? 100_000
        let fx = try QueryFixture()
        try fx.createClass("Bench", fields: ["text": FieldInfo(type: .string), "category": FieldInfo(type: .string),
                                             "likes": FieldInfo(type: .number), "location": FieldInfo(type: .geoPoint)])
        var t0 = monotonicNanos()
        try fx.conn.execute("BEGIN")
        var rng = SeededGenerator(seed: 7)
        let cats = ["food", "events", "traffic", "lost", "misc"]
        for k in 0..<rows {
            let lat = 40 + Double(Int.random(in: 0..<1_000_000, using: &rng)) / 1e6
            let lng = -74.5 + Double(Int.random(in: 0..<1_000_000, using: &rng)) / 1e6
            let data = #"{"text":"seed post #\#(k)","category":"\#(cats[k % 5])","likes":0,"location":{"__type":"GeoPoint","latitude":\#(lat),"longitude":\#(lng)}}"#
            try fx.conn.run("INSERT INTO \"Bench\"(objectId, createdAt, updatedAt, ACL, rperm, wperm, data) VALUES (?,?,?,NULL,NULL,NULL,?)",
                            [.text("b\(k)"), .integer(1_700_000_000_000 + Int64(k) * 1000), .integer(1_700_000_000_000), .text(data)])
            try fx.conn.run(Naming.geoInsertSQL("Bench", "location"), [.integer(fx.conn.lastInsertRowid), .real(lat), .real(lng)])
        }
        try fx.conn.execute("COMMIT; ANALYZE")
        print("seeded \(rows) rows in \((monotonicNanos() - t0) / 1_000_000) ms")
        t0 = monotonicNanos()

        func box(_ size: Double, _ i: Int) -> String {
            let s = 40.1 + Double(i % 7) * 0.1, w = -74.4 + Double(i % 5) * 0.15
            return #"{"location":{"$within":{"$box":[{"__type":"GeoPoint","latitude":\#(s),"longitude":\#(w)},{"__type":"GeoPoint","latitude":\#(s + size),"longitude":\#(w + size)}]}}}"#
        }
        func near(_ i: Int) -> String {
            let lat = 40.2 + Double(i % 7) * 0.08, lng = -74.3 + Double(i % 5) * 0.1
            return #"{"location":{"$nearSphere":{"__type":"GeoPoint","latitude":\#(lat),"longitude":\#(lng)},"$maxDistanceInMiles":5}}"#
        }
        let workloads: [(String, (Int) -> String)] = [("W3 0.1° box", { box(0.1, $0) }), ("W3s 0.01° box", { box(0.01, $0) }), ("W5 near 5 mi", near)]
        let schema = fx.schemas["Bench"]!
        let order = [SortKey(field: "createdAt", descending: true)]
        for (name, make) in workloads {
            // Same rows from every plan.
            let compiled = try QueryCompiler(schema: schema).compile(json(make(0)))
            let b = SelectBuilder(schema: schema, compiled: compiled, acl: SelectBuilder.aclFilter(.anonymous))
            var seen: [[String]] = []
            for plan in [GeoPlan.generic, .rtreeJoin, .createdAtWalk, .rtreeSetScan, .rtreeSetWalk] {
                let s = try b.select(plan: plan, order: order, limit: 20, skip: 0)
                var ids: [String] = []
                try fx.conn.query(s.sql, s.binds) { (st) throws(ParseError) in ids.append(st.text(0) ?? "") }
                seen.append(ids)
            }
            if let rids = try GeoPlanner.newestByRid(builder: b, limit: 20, skip: 0, on: fx.conn) {
                var ids: [String] = []
                try SelectBuilder.rowsByRid("Bench", rids, on: fx.conn) { (st) throws(ParseError) in ids.append(st.text(0) ?? "") }
                seen.append(ids)
                print("\(name): newestByRid applies")
            }
            if let cells = GeoCellPlan(geo: compiled.geo!), let rids = try cells.run(builder: b, geo: compiled.geo!, descending: true, limit: 20, skip: 0, on: fx.conn) {
                seen.append(try { () throws -> [String] in
                    var ids: [String] = []
                    try SelectBuilder.rowsByRid("Bench", rids, on: fx.conn) { (st) throws(ParseError) in ids.append(st.text(0) ?? "") }
                    return ids
                }())
                var scanned: [Int] = []
                for i in 0..<50 {
                    let b = SelectBuilder(schema: schema, compiled: try QueryCompiler(schema: schema).compile(json(make(i))), acl: SelectBuilder.aclFilter(.anonymous))
                    if let c = GeoCellPlan(geo: b.compiled.geo!), let r = try c.runCounting(builder: b, geo: b.compiled.geo!, descending: true, limit: 20, skip: 0, on: fx.conn) {
                        scanned.append(r.scanned)
                    }
                }
                scanned.sort()
                print("\(name): cell plan applies (\(cells.cells.count) cells, \(cells.cells.filter(\.interior).count) interior, coverage \(cells.coverage)); rows read p50 \(scanned[scanned.count / 2]) max \(scanned.last ?? 0)")
            }
            #expect(seen.allSatisfy { $0 == seen[0] })
            let hits = try fx.executor.count(className: "Bench", where: json(make(0)), identity: .master, on: fx.conn)
            let chosen = try GeoPlanner.plan(builder: b, order: order, limit: 20, skip: 0, on: fx.conn)
            let label: String
            switch chosen {
            case .rids: label = "rids (cell plan, else newestByRid)"
            case .select(let p): label = "\(p)"
            }
            print("\(name): ~\(hits) hits, planner picks \(label)")
            var ridCPU: [UInt64] = []
            for i in 0..<200 {
                let c0 = threadCPUNanos()
                let b = SelectBuilder(schema: schema, compiled: try QueryCompiler(schema: schema).compile(json(make(i))), acl: SelectBuilder.aclFilter(.anonymous))
                _ = try GeoPlanner.newestByRid(builder: b, limit: 20, skip: 0, on: fx.conn)
                ridCPU.append(threadCPUNanos() - c0)
            }
            ridCPU.sort()
            print("  newestByRid (compile + rids + proof, no count): CPU p50 \(ridCPU[100] / 1000) µs p99 \(ridCPU[198] / 1000) µs")
            var cellCPU: [UInt64] = []
            for i in 0..<200 {
                let c0 = threadCPUNanos()
                let b = SelectBuilder(schema: schema, compiled: try QueryCompiler(schema: schema).compile(json(make(i))), acl: SelectBuilder.aclFilter(.anonymous))
                if let cells = GeoCellPlan(geo: b.compiled.geo!) {
                    _ = try cells.run(builder: b, geo: b.compiled.geo!, descending: true, limit: 20, skip: 0, on: fx.conn)
                }
                cellCPU.append(threadCPUNanos() - c0)
            }
            cellCPU.sort()
            print("  cell plan (compile + cells + rids, no count): CPU p50 \(cellCPU[100] / 1000) µs p99 \(cellCPU[198] / 1000) µs")
            for plan in [GeoPlan.rtreeJoin, .createdAtWalk, .rtreeSetScan, .rtreeSetWalk, .generic, nil] {
                var cpu: [UInt64] = [], wall: [UInt64] = []
                for i in 0..<(plan == .createdAtWalk && name.hasPrefix("W3s") ? 5 : 200) {
                    let w = json(make(i))
                    let c0 = threadCPUNanos(), w0 = monotonicNanos()
                    if let plan {
                        let compiled = try QueryCompiler(schema: schema).compile(w)
                        let b = SelectBuilder(schema: schema, compiled: compiled, acl: SelectBuilder.aclFilter(.anonymous))
                        let s = try b.select(plan: plan, order: order, limit: 20, skip: 0)
                        var n = 0
                        try fx.conn.query(s.sql, s.binds) { _ in n += 1 }
                    } else {
                        let q = FindQuery(className: "Bench", where: w, order: order, limit: 20)
                        _ = try fx.executor.find(q, identity: .anonymous, on: fx.conn).responseBody()
                    }
                    cpu.append(threadCPUNanos() - c0)
                    wall.append(monotonicNanos() - w0)
                }
                cpu.sort(); wall.sort()
                if cpu.count < 200 { print("  \(plan!): CPU p50 \(cpu[cpu.count / 2] / 1000) µs"); continue }
                let label = plan.map { "\($0)" } ?? "find() (planner + JSON)"
                print("  \(label): CPU p50 \(cpu[100] / 1000) µs p99 \(cpu[198] / 1000) µs; wall p50 \(wall[100] / 1000) µs p99 \(wall[198] / 1000) µs")
            }
        }
        print("timed in \((monotonicNanos() - t0) / 1_000_000) ms")
    }
}
