import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Testing
@testable import MoonbaseStore

/// The cell plan (`GeoCellPlan`): the same rows as the generic plan for every identity, order,
/// page, tie and area shape; its geometry; giving up; tables without the cell index.
@Suite struct QueryGeoCellTests {
    let fx: QueryFixture
    let schema: QuerySchema

    /// 3,000 points over 0.6° × 0.6° around (40.3, −74.0); three rows per timestamp (ties), every
    /// 40th row back-dated (rid order is not time order), ACLs on every 7th (u1) and 11th (u2).
    init() throws {
        fx = try QueryFixture()
        try fx.createClass("P", fields: ["loc": FieldInfo(type: .geoPoint), "cat": FieldInfo(type: .number)])
        var rng = SeededGenerator(seed: 5)
        for k in 0..<3000 {
            let lat = 40 + Double.random(in: 0..<0.6, using: &rng), lng = -74.3 + Double.random(in: 0..<0.6, using: &rng)
            let created = 1_700_000_000_000 + Int64(k / 3) * 1000 - (k % 40 == 0 ? 500_000 : 0)
            try fx.insert("P", ["loc": geoPoint(lat, lng), "cat": .int(Int64(k % 4))], createdAt: created,
                          readers: k % 7 == 0 ? ["u1"] : k % 11 == 0 ? ["u2"] : nil)
        }
        // Points exactly on cell boundaries (multiples of 0.05°).
        for (i, p) in [(40.1, -74.0), (40.15, -73.95), (40.2, -74.05), (40.25, -74.1)].enumerated() {
            try fx.insert("P", ["loc": geoPoint(p.0, p.1), "cat": 0], createdAt: 1_700_000_999_000 + Int64(i % 2))
        }
        schema = fx.schemas["P"]!
    }

    static let areas = [
        #"{"loc":{"$nearSphere":{"__type":"GeoPoint","latitude":40.3,"longitude":-74.0},"$maxDistanceInMiles":4}}"#,
        #"{"loc":{"$nearSphere":{"__type":"GeoPoint","latitude":40.02,"longitude":-74.28},"$maxDistanceInMiles":3},"cat":{"$ne":1}}"#,
        #"{"loc":{"$geoWithin":{"$centerSphere":[[-73.95,40.15],0.0006]}}}"#,
        #"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":40.1,"longitude":-74.1},{"__type":"GeoPoint","latitude":40.25,"longitude":-73.95}]}}}"#,
        #"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":40.13,"longitude":-74.07},{"__type":"GeoPoint","latitude":40.31,"longitude":-73.88}]}},"cat":{"$in":[0,3]}}"#,
        #"{"loc":{"$nearSphere":{"__type":"GeoPoint","latitude":45.0,"longitude":-70.0},"$maxDistanceInMiles":5}}"#,
    ]

    func ids(_ s: QueryCompiler.Frag) throws -> [String] {
        var ids: [String] = []
        try fx.conn.query(s.sql, s.binds) { (st) throws(ParseError) in ids.append(st.text(0) ?? "") }
        return ids
    }

    /// The objectIds of a rid plan's page, read as the executor reads it.
    func ids(_ rids: [Int64]) throws -> [String] {
        var ids: [String] = []
        try SelectBuilder.rowsByRid("P", rids, on: fx.conn) { (st) throws(ParseError) in ids.append(st.text(0) ?? "") }
        return ids
    }

    /// The shared statement texts and this query's binds equal what `cellSQL` builds, before
    /// and after the texts are remembered, for every area (other filters with binds included),
    /// identity and direction.
    @Test func cellStatementsEqualTheBuiltOnes() throws {
        for area in Self.areas {
            let compiled = try QueryCompiler(schema: schema).compile(json(area))
            let geo = try #require(compiled.geo)
            for identity in [Identity.anonymous, .user("u1"), .user("u2", roles: ["r1", "r2"]), .master] {
                let b = SelectBuilder(schema: schema, compiled: compiled, acl: SelectBuilder.aclFilter(identity))
                for desc in [true, false] {
                    let built = (GeoCellPlan.cellSQL(builder: b, geo: geo, exact: true, descending: desc),
                                 GeoCellPlan.cellSQL(builder: b, geo: geo, exact: false, descending: desc))
                    for _ in 0..<2 {
                        let shared = GeoCellPlan.cellStatements(builder: b, geo: geo, descending: desc)
                        #expect(shared.edge.sql == built.0.sql && shared.edge.binds == built.0.binds, "\(area) \(identity) \(desc)")
                        #expect(shared.inner.sql == built.1.sql && shared.inner.binds == built.1.binds, "\(area) \(identity) \(desc)")
                    }
                }
            }
        }
    }

    @Test(arguments: 0..<areas.count)
    func cellPlanAgreesWithGenericPlan(_ a: Int) throws {
        let compiled = try QueryCompiler(schema: schema).compile(json(Self.areas[a]))
        let geo = try #require(compiled.geo)
        let cells = try #require(GeoCellPlan(geo: geo))
        #expect(cells.cells.count <= GeoCellPlan.maxCells)
        for identity in [Identity.anonymous, .user("u1"), .master] {
            let b = SelectBuilder(schema: schema, compiled: compiled, acl: SelectBuilder.aclFilter(identity))
            #expect(GeoCellPlan.available(builder: b, geo: geo, on: fx.conn))
            for desc in [true, false] {
                let order = [SortKey(field: "createdAt", descending: desc)]
                for (limit, skip) in [(20, 0), (7, 5), (50, 30), (1, 0)] {
                    let expected = try ids(try b.select(plan: .generic, order: order, limit: limit, skip: skip))
                    let rids = try #require(try cells.run(builder: b, geo: geo, descending: desc, limit: limit, skip: skip, on: fx.conn))
                    #expect(try ids(rids) == expected, "area \(a) \(identity) desc \(desc) \(limit)/\(skip)")
                    if a == Self.areas.count - 1 { #expect(expected.isEmpty) } else if [0, 3].contains(a), limit == 20 { #expect(expected.count == 20) }
                }
            }
        }
    }

    /// Through `find` (the planner picks the cell plan for the dense areas): same pages as the
    /// generic plan, including ties on createdAt and back-dated rows.
    @Test func findUsesPlanAndAgrees() throws {
        // A dense cluster (150,000 per square degree) inside the first area: enough hits for the cell plan.
        var rng = SeededGenerator(seed: 6)
        for k in 0..<1500 {
            try fx.insert("P", ["loc": geoPoint(40.25 + Double.random(in: 0..<0.1, using: &rng), -74.05 + Double.random(in: 0..<0.1, using: &rng)),
                                "cat": .int(Int64(k % 4))], createdAt: 1_700_000_500_000 + Int64(k / 2) * 1000, readers: k % 5 == 0 ? ["u1"] : nil)
        }
        for w in Self.areas {
            for order in ["-createdAt", "createdAt"] {
                let compiled = try QueryCompiler(schema: schema).compile(json(w))
                let b = SelectBuilder(schema: schema, compiled: compiled, acl: SelectBuilder.aclFilter(.anonymous))
                let expected = try ids(try b.select(plan: .generic, order: [SortKey(field: "createdAt", descending: order == "-createdAt")], limit: 30, skip: 2))
                let got = try fx.find("P", json(w), order: order, limit: 30, skip: 2, identity: .anonymous).objects.map { $0["objectId"]?.stringValue ?? "?" }
                #expect(got == expected)
            }
        }
        let w = json(Self.areas[0])
        let b = SelectBuilder(schema: schema, compiled: try QueryCompiler(schema: schema).compile(w), acl: nil)
        let choice = try GeoPlanner.plan(builder: b, order: [SortKey(field: "createdAt", descending: true)], limit: 20, skip: 0, on: fx.conn)
        guard case .rids(let rids) = choice else { Issue.record("expected the cell plan, got \(choice)"); return }
        #expect(rids.count == 20)
    }

    /// Small areas (few hits): the planner joins the hits it collected while counting them
    /// (`GeoPlan.candidates`) and `find` sorts and pages them itself — the same pages as the
    /// generic plan (ties on createdAt broken by rid, back-dated rows, ACLs, other filters), with
    /// and without `keys` (which takes SQLite's ORDER BY … LIMIT), and counts.
    @Test func fewHitsArePagedLikeTheGenericPlan() throws {
        let small = [
            #"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":40.2,"longitude":-74.1},{"__type":"GeoPoint","latitude":40.23,"longitude":-74.07}]}}}"#,
            #"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":40.1,"longitude":-74.1},{"__type":"GeoPoint","latitude":40.14,"longitude":-74.06}]}},"cat":{"$ne":2}}"#,
            #"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":45,"longitude":-70},{"__type":"GeoPoint","latitude":45.01,"longitude":-69.99}]}}}"#,
        ]
        var pages = 0
        for w in small {
            let compiled = try QueryCompiler(schema: schema).compile(json(w))
            for identity in [Identity.anonymous, .user("u1"), .master] {
                let b = SelectBuilder(schema: schema, compiled: compiled, acl: SelectBuilder.aclFilter(identity))
                for desc in [true, false] {
                    let order = [SortKey(field: "createdAt", descending: desc)]
                    for (limit, skip) in [(20, 0), (3, 2), (2, 0), (5, 1000), (1, 0)] {
                        let choice = try GeoPlanner.plan(builder: b, order: order, limit: limit, skip: skip, on: fx.conn)
                        guard case .select(.candidates) = choice else { Issue.record("expected the candidates plan, got \(choice)"); continue }
                        let expected = try ids(try b.select(plan: .generic, order: order, limit: limit, skip: skip))
                        let r = try fx.find("P", json(w), order: desc ? "-createdAt" : "createdAt", limit: limit, skip: skip,
                                            count: true, identity: identity)
                        #expect(r.objects.map { $0["objectId"]?.stringValue ?? "?" } == expected, "\(w) \(identity) \(desc) \(limit)/\(skip)")
                        #expect(r.count == (try ids(try b.select(plan: .generic, order: order, limit: 1000, skip: 0))).count)
                        let keyed = try fx.find("P", json(w), order: desc ? "-createdAt" : "createdAt", limit: limit, skip: skip,
                                                keys: "cat", identity: identity)
                        #expect(keyed.objects.map { $0["objectId"]?.stringValue ?? "?" } == expected)
                        if !expected.isEmpty { pages += 1 }
                    }
                }
            }
        }
        #expect(pages > 20)
    }

    /// The planner's guess of an area's hits (`GeoPlanner.expectedHits`): rows × the share of the
    /// index's extent (its root cells) the area covers; near the truth for points spread evenly.
    @Test func expectedHitsFollowTheIndexExtent() throws {
        let box = { (s: Double, w: Double, d: Double) in
            #"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":\#(s),"longitude":\#(w)},{"__type":"GeoPoint","latitude":\#(s + d),"longitude":\#(w + d)}]}}}"#
        }
        for (s, w, d) in [(40.1, -74.2, 0.3), (40.0, -74.3, 0.6), (40.3, -74.0, 0.15)] {
            let geo = try #require(try QueryCompiler(schema: schema).compile(json(box(s, w, d))).geo)
            let expected = try #require(GeoPlanner.expectedHits(geo: geo, table: Naming.table("P"), on: fx.conn))
            let actual = try GeoPlanner.countHits(geo: geo, upTo: 1_000_000, on: fx.conn)
            #expect(abs(expected - Double(actual)) <= 0.25 * Double(actual), "\(d)°: expected \(expected), counted \(actual)")
        }
        // Outside the extent: none expected.
        let far = try #require(try QueryCompiler(schema: schema).compile(json(box(10, 10, 1))).geo)
        #expect(GeoPlanner.expectedHits(geo: far, table: Naming.table("P"), on: fx.conn) == 0)
        #expect(GeoPlanner.GeoExtent.parseRoot("{12 40 41 -74.5 -74.0077} {13 39.5 40.5 -74.082 -73.5}")
                == GeoBox(south: 39.5, north: 41, west: -74.5, east: -73.5))
        #expect(GeoPlanner.GeoExtent.parseRoot("") == nil)
        // An empty index: no guess (the planner counts, as before).
        try fx.createClass("Q", fields: ["loc": FieldInfo(type: .geoPoint)])
        let q = QuerySchema(className: "Q", fields: ["loc": FieldInfo(type: .geoPoint)])
        let empty = try #require(try QueryCompiler(schema: q).compile(json(box(40, -74, 1))).geo)
        #expect(GeoPlanner.expectedHits(geo: empty, table: Naming.table("Q"), on: fx.conn) == nil)
    }

    /// Areas across the antimeridian (two boxes): cells on both sides, same rows as the generic plan.
    @Test func acrossTheAntimeridian() throws {
        var rng = SeededGenerator(seed: 12)
        for k in 0..<600 {
            var lng = 179.8 + Double.random(in: 0..<0.4, using: &rng)
            if lng > 180 { lng -= 360 }
            try fx.insert("P", ["loc": geoPoint(-17.2 + Double.random(in: 0..<0.4, using: &rng), lng), "cat": 0],
                          createdAt: 1_700_000_000_000 + Int64(k % 200) * 1000, readers: k % 3 == 0 ? ["u1"] : nil)
        }
        for w in [#"{"loc":{"$nearSphere":{"__type":"GeoPoint","latitude":-17.0,"longitude":179.98},"$maxDistanceInMiles":6}}"#,
                  #"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":-17.1,"longitude":179.9},{"__type":"GeoPoint","latitude":-16.95,"longitude":-179.92}]}}}"#] {
            let compiled = try QueryCompiler(schema: schema).compile(json(w))
            let geo = try #require(compiled.geo)
            #expect(geo.boxes.count == 2)
            let cells = try #require(GeoCellPlan(geo: geo))
            for desc in [true, false] {
                let b = SelectBuilder(schema: schema, compiled: compiled, acl: SelectBuilder.aclFilter(.anonymous))
                let order = [SortKey(field: "createdAt", descending: desc)]
                let expected = try ids(try b.select(plan: .generic, order: order, limit: 15, skip: 4))
                #expect(expected.count == 15)
                let rids = try #require(try cells.run(builder: b, geo: geo, descending: desc, limit: 15, skip: 4, on: fx.conn))
                #expect(try ids(rids) == expected)
                #expect(try fx.find("P", json(w), order: desc ? "-createdAt" : "createdAt", limit: 15, skip: 4, identity: .anonymous)
                    .objects.map { $0["objectId"]?.stringValue ?? "?" } == expected)
            }
        }
    }

    /// Over budget (a filter few rows pass), the plan gives up; the planner still answers right.
    @Test func givesUpOverBudget() throws {
        let w = json(#"{"loc":{"$nearSphere":{"__type":"GeoPoint","latitude":40.3,"longitude":-74.0},"$maxDistanceInMiles":4},"cat":7}"#)
        let compiled = try QueryCompiler(schema: schema).compile(w)
        let b = SelectBuilder(schema: schema, compiled: compiled, acl: nil)
        let cells = try #require(GeoCellPlan(geo: compiled.geo!))
        #expect(try cells.run(builder: b, geo: compiled.geo!, descending: true, limit: 20, skip: 0, budget: 50, on: fx.conn) == nil)
        #expect(try cells.run(builder: b, geo: compiled.geo!, descending: true, limit: 20, skip: 0, budget: 100_000, on: fx.conn) == [])
        try fx.insert("P", ["loc": geoPoint(40.3, -74.0), "cat": 7], id: "seven")
        #expect(try fx.ids("P", w, order: "-createdAt") == ["seven"])
    }

    /// A table from before the cell index: the planner uses the R*Tree plans.
    @Test func withoutCellIndexOtherPlansAnswer() throws {
        try fx.conn.execute("DROP INDEX \(Naming.geoCellIndex("P", "loc"))")
        let w = json(Self.areas[0])
        let b = SelectBuilder(schema: schema, compiled: try QueryCompiler(schema: schema).compile(w), acl: nil)
        #expect(!GeoCellPlan.available(builder: b, geo: b.compiled.geo!, on: fx.conn))
        let expected = try ids(try b.select(plan: .generic, order: [SortKey(field: "createdAt", descending: true)], limit: 20, skip: 0))
        #expect(expected.count == 20)
        #expect(try fx.ids("P", w, order: "-createdAt", limit: 20) == expected)
    }

    /// The SQL cell expression and the Swift cell computation agree, on boundaries too.
    @Test func cellExpressionMatchesSwift() throws {
        let points: [(Double, Double)] = [(40.05, -74.0), (40.1, -73.95), (-0.05, -0.05), (0, 0), (89.99, 179.99), (90, 180),
                                          (-90, -180), (40.123456, -74.654321), (-33.8688, 151.2093)]
        for (lat, lng) in points {
            let sql = "SELECT \(Naming.geoCellExpr("loc")) FROM (SELECT ? AS data)"
            let doc = #"{"loc":{"__type":"GeoPoint","latitude":\#(lat),"longitude":\#(lng)}}"#
            let v = try fx.conn.scalar(sql, [.text(doc)])
            #expect(v == .integer(GeoCellPlan.latCell(lat) * Naming.geoCellStride + GeoCellPlan.lngCell(lng)), "\(lat),\(lng)")
        }
    }

    /// `minDistance`/`maxDistance` bound every sampled point of a cell (interior and skipped
    /// cells are decided on them).
    @Test func cellDistanceBounds() {
        var rng = SeededGenerator(seed: 11)
        for _ in 0..<300 {
            let c = GeoCircle(latitude: Double.random(in: -70...70, using: &rng), longitude: Double.random(in: -180...180, using: &rng), radians: 0.01)
            let s = c.latitude + Double.random(in: -1...1, using: &rng), w = c.longitude + Double.random(in: -1...1, using: &rng)
            let r = GeoBox(south: s, north: s + 0.05, west: w, east: w + 0.05)
            var lo = Double.infinity, hi = 0.0
            for i in 0...10 {
                for j in 0...10 {
                    let d = geoDistanceRadians(lat1: c.latitude, lng1: c.longitude, lat2: s + 0.005 * Double(i), lng2: w + 0.005 * Double(j))
                    lo = min(lo, d); hi = max(hi, d)
                }
            }
            #expect(GeoCellPlan.minDistance(c, r) <= lo + 1e-12)
            #expect(GeoCellPlan.maxDistance(c, r)! >= hi - 1e-12)
        }
    }
}
