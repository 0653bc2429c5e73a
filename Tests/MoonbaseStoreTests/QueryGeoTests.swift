import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Testing
@testable import MoonbaseStore

/// Geo queries on real SQLite: distances, nearest-first, boxes and their edges, and the
/// planner's alternative plans returning the same rows as the generic plan.
@Suite struct QueryGeoTests {
    let fx: QueryFixture
    static let cities: [(String, Double, Double)] = [
        ("nyc", 40.7128, -74.0060), ("la", 34.0522, -118.2437), ("london", 51.5074, -0.1278),
        ("paris", 48.8566, 2.3522), ("tokyo", 35.6762, 139.6503), ("suva", -18.1248, 178.4501),
        ("apia", -13.8333, -171.7667),
    ]

    init() throws {
        fx = try QueryFixture()
        try fx.createClass("Place", fields: ["name": FieldInfo(type: .string), "loc": FieldInfo(type: .geoPoint)])
        for (name, lat, lng) in Self.cities {
            try fx.insert("Place", ["name": .string(name), "loc": geoPoint(lat, lng)], id: name)
        }
        try fx.insert("Place", ["name": "nowhere"], id: "nowhere")
    }

    func near(_ lat: Double, _ lng: Double, _ extra: String = "", order: String? = nil) throws -> [String] {
        let w = json(#"{"loc":{"$nearSphere":{"__type":"GeoPoint","latitude":\#(lat),"longitude":\#(lng)}\#(extra)}}"#)
        return try fx.ids("Place", w, order: order)
    }

    @Test(arguments: [("nyc", "la", 2446.0), ("london", "paris", 214.0)])
    func cityDistances(_ a: String, _ b: String, _ miles: Double) throws {
        let pa = Self.cities.first { $0.0 == a }!, pb = Self.cities.first { $0.0 == b }!
        let d = geoDistanceRadians(lat1: pa.1, lng1: pa.2, lat2: pb.1, lng2: pb.2) * EarthRadius.miles
        #expect(abs(d - miles) / miles < 0.01)
        // Through SQL: b is within 1% over the distance, and not within 1% under it.
        #expect(try near(pa.1, pa.2, #","$maxDistanceInMiles":\#(miles * 1.01)"#).contains(b))
        #expect(try !near(pa.1, pa.2, #","$maxDistanceInMiles":\#(miles * 0.99)"#).contains(b))
        let km = miles * 1.609344
        #expect(try near(pa.1, pa.2, #","$maxDistanceInKilometers":\#(km * 1.01)"#).contains(b))
        #expect(try !near(pa.1, pa.2, #","$maxDistanceInRadians":\#(miles * 0.99 / EarthRadius.miles)"#).contains(b))
    }

    @Test func nearestFirstUnlessOrdered() throws {
        func distance(_ c: (String, Double, Double)) -> Double { geoDistanceRadians(lat1: 51.5, lng1: 0, lat2: c.1, lng2: c.2) }
        let expected = Self.cities.sorted { distance($0) < distance($1) }.map(\.0)
        #expect(expected.prefix(3) == ["london", "paris", "nyc"])
        #expect(try near(51.5, 0) == expected)
        #expect(try near(51.5, 0, #","$maxDistanceInMiles":1000"#) == ["london", "paris"])
        #expect(try near(51.5, 0, #","$maxDistanceInMiles":1000"#, order: "-name") == ["paris", "london"])
    }

    @Test func boxesAndEdges() throws {
        func box(_ s: Double, _ w: Double, _ n: Double, _ e: Double) throws -> [String] {
            try fx.ids("Place", json(#"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":\#(s),"longitude":\#(w)},{"__type":"GeoPoint","latitude":\#(n),"longitude":\#(e)}]}}}"#), order: "name")
        }
        #expect(try box(40, -80, 52, 3) == ["london", "nyc", "paris"])
        // Edges are inclusive, exactly (R*Tree coordinates are 32-bit floats: the exact test decides).
        #expect(try box(40.7128, -74.0060, 40.7128, -74.0060) == ["nyc"])
        #expect(try box(40.71281, -74.0060, 41, -74) == [])
        #expect(try box(40, -74.00599, 41, -73) == [])
        // Across the antimeridian: Suva (178.45) and Apia (-171.77).
        #expect(try box(-20, 170, -10, -170) == ["apia", "suva"])
        let geoWithin = try fx.ids("Place", json(#"{"loc":{"$geoWithin":{"$box":[{"__type":"GeoPoint","latitude":-20,"longitude":170},{"__type":"GeoPoint","latitude":-10,"longitude":-170}]}}}"#), order: "name")
        #expect(geoWithin == ["apia", "suva"])
    }

    @Test func centerSphere() throws {
        let r = 300 / EarthRadius.miles
        let a = try fx.ids("Place", json(#"{"loc":{"$geoWithin":{"$centerSphere":[[2.35,48.85],\#(r)]}}}"#), order: "name")
        let b = try fx.ids("Place", json(#"{"loc":{"$geoWithin":{"$centerSphere":[{"__type":"GeoPoint","latitude":48.85,"longitude":2.35},\#(r)]}}}"#), order: "name")
        #expect(a == ["london", "paris"] && b == a)
        // Across the antimeridian: 700 miles around Suva reaches neither Apia (~720 mi)… 800 does.
        #expect(try near(-18.1248, 178.4501, #","$maxDistanceInMiles":800"#) == ["suva", "apia"])
    }

    @Test func geoInsideOrUsesGenericPlan() throws {
        let w = json(#"{"$or":[{"name":"tokyo"},{"loc":{"$nearSphere":{"__type":"GeoPoint","latitude":48.85,"longitude":2.35},"$maxDistanceInMiles":10}}]}"#)
        #expect(try fx.ids("Place", w, order: "name") == ["paris", "tokyo"])
    }

    /// Every plan returns the same rows as the generic one, with other constraints and ACLs.
    @Test func plansAgree() throws {
        let fx = try QueryFixture()
        try fx.createClass("P", fields: ["loc": FieldInfo(type: .geoPoint), "cat": FieldInfo(type: .number)])
        var rng = SeededGenerator(seed: 42)
        for k in 0..<2000 {
            let lat = 40 + Double.random(in: 0..<1, using: &rng), lng = -74.5 + Double.random(in: 0..<1, using: &rng)
            try fx.insert("P", ["loc": geoPoint(lat, lng), "cat": .int(Int64(k % 3))], createdAt: 1_700_000_000_000 + Int64(k) * 1000,
                          readers: k % 7 == 0 ? ["u1"] : nil)
        }
        // Every 50th row is back-dated: rid order is then not createdAt order everywhere.
        for k in stride(from: 0, to: 2000, by: 50) {
            try fx.insert("P", ["loc": geoPoint(40.3 + Double(k) / 10_000, -74.2), "cat": 0], createdAt: 1_700_000_000_000 + Int64(k) * 1000 + 500)
        }
        let schema = fx.schemas["P"]!
        for w in [#"{"loc":{"$nearSphere":{"__type":"GeoPoint","latitude":40.5,"longitude":-74.0},"$maxDistanceInMiles":5},"cat":{"$ne":1}}"#,
                  #"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":40.2,"longitude":-74.3},{"__type":"GeoPoint","latitude":40.5,"longitude":-74.1}]}}}"#] {
            let compiled = try QueryCompiler(schema: schema).compile(json(w))
            for identity in [Identity.anonymous, .master] {
                let b = SelectBuilder(schema: schema, compiled: compiled, acl: SelectBuilder.aclFilter(identity))
                var results: [[String]] = []
                for plan in [GeoPlan.generic, .rtreeJoin, .createdAtWalk, .rtreeSetScan, .rtreeSetWalk] {
                    let order = [SortKey(field: "createdAt", descending: true)]
                    let s = try b.select(plan: plan, order: order, limit: 20, skip: 3)
                    var ids: [String] = []
                    try fx.conn.query(s.sql, s.binds) { (st) throws(ParseError) in ids.append(st.text(0) ?? "") }
                    results.append(ids)
                }
                if let geo = compiled.geo, geo.boxes.count == 1 {
                    let found = try GeoPlanner.candidates(geo: geo, upTo: 1_000_000, on: fx.conn)
                    let s = try b.select(plan: .candidates(found.ids), order: [SortKey(field: "createdAt", descending: true)], limit: 20, skip: 3)
                    var ids: [String] = []
                    try fx.conn.query(s.sql, s.binds) { (st) throws(ParseError) in ids.append(st.text(0) ?? "") }
                    results.append(ids)
                    #expect(found.hits > 20)
                }
                if let rids = try GeoPlanner.newestByRid(builder: b, limit: 20, skip: 3, on: fx.conn) {
                    var ids: [String] = []
                    try SelectBuilder.rowsByRid("P", rids, on: fx.conn) { (st) throws(ParseError) in ids.append(st.text(0) ?? "") }
                    results.append(ids)
                }
                #expect(results[0].count >= 10)
                #expect(results.allSatisfy { $0 == results[0] })
            }
        }
    }

    /// The rid-ordered plan proves its page or steps aside when timestamps are out of rid order.
    @Test func newestByRidProvesOrFallsBack() throws {
        let fx = try QueryFixture()
        try fx.createClass("P", fields: ["loc": FieldInfo(type: .geoPoint)])
        for k in 0..<300 {
            try fx.insert("P", ["loc": geoPoint(40 + Double(k % 17) / 100, -74 + Double(k % 13) / 100)], createdAt: 1_700_000_000_000 + Int64(k) * 1000)
        }
        let schema = fx.schemas["P"]!
        let w = json(#"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":40,"longitude":-74},{"__type":"GeoPoint","latitude":40.1,"longitude":-73.9}]}}}"#)
        let order = [SortKey(field: "createdAt", descending: true)]
        func page() throws -> ([Int64]?, [String]) {
            let b = SelectBuilder(schema: schema, compiled: try QueryCompiler(schema: schema).compile(w), acl: nil)
            let rids = try GeoPlanner.newestByRid(builder: b, limit: 50, skip: 0, on: fx.conn)
            return (rids, try fx.ids("P", w, order: "-createdAt", limit: 50))
        }
        let (rids, ids) = try page()
        #expect(rids?.count == 50)
        #expect(ids.count == 50)
        // A newer rid with an old timestamp inside the box: the proof fails, the adaptive plan answers.
        try fx.insert("P", ["loc": geoPoint(40.05, -73.95)], id: "late", createdAt: 1_600_000_000_000)
        let (rids2, ids2) = try page()
        #expect(rids2 == nil)
        #expect(ids2 == ids)
        #expect(try fx.ids("P", w, order: "createdAt", limit: 1) == ["late"])
    }

    /// The planner follows the cost model: few hits → R*Tree join; newest-first over many hits in
    /// a small area → the cell plan (rids); large areas: rid plan when moderate, walk when dense.
    @Test func plannerChoices() throws {
        let fx = try QueryFixture()
        try fx.createClass("P", fields: ["loc": FieldInfo(type: .geoPoint)])
        var rng = SeededGenerator(seed: 9)
        // 4,000 points over 0.5° × 0.5°: 16,000 per square degree.
        for k in 0..<4000 {
            try fx.insert("P", ["loc": geoPoint(40 + Double.random(in: 0..<0.5, using: &rng), -74 + Double.random(in: 0..<0.5, using: &rng))],
                          createdAt: 1_700_000_000_000 + Int64(k) * 1000)
        }
        let schema = fx.schemas["P"]!
        func choice(_ lat: Double, _ lng: Double, _ size: Double, _ order: String) throws -> String {
            let w = json(#"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":\#(lat),"longitude":\#(lng)},{"__type":"GeoPoint","latitude":\#(lat + size),"longitude":\#(lng + size)}]}}}"#)
            let b = SelectBuilder(schema: schema, compiled: try QueryCompiler(schema: schema).compile(w), acl: nil)
            let desc = order.hasPrefix("-")
            switch try GeoPlanner.plan(builder: b, order: [SortKey(field: "createdAt", descending: desc)], limit: 10, skip: 0, on: fx.conn) {
            case .rids: return "rids"
            case .select(.candidates): return "candidates"
            case .select(let p): return "\(p)"
            }
        }
        #expect(try choice(40.1, -73.9, 0.02, "-createdAt") == "candidates")  // ~6 hits, collected while counted
        #expect(try choice(40.1, -73.9, 0.02, "createdAt") == "candidates")
        // No hit at all: an empty candidate list, an empty page.
        #expect(try choice(10, 10, 0.02, "-createdAt") == "candidates")
        #expect(try fx.ids("P", json(#"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":10,"longitude":10},{"__type":"GeoPoint","latitude":10.02,"longitude":10.02}]}}}"#), order: "-createdAt", limit: 10) == [])
        #expect(try choice(40.1, -73.9, 0.2, "-createdAt") == "rids")        // ~640 hits, ≤ 25 cells: cell plan
        #expect(try choice(40.1, -73.9, 0.2, "createdAt") == "rids")
        #expect(try GeoCellPlan(geo: try QueryCompiler(schema: schema).compile(json(#"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":40.1,"longitude":-73.9},{"__type":"GeoPoint","latitude":40.55,"longitude":-73.45}]}}}"#)).geo!) == nil)
        // Over 64 cells: K·N = 40,000, rid plan from √1,400 ≈ 37 hits, walk from √312,000 ≈ 559.
        #expect(try choice(40.4, -73.6, 0.5, "-createdAt") == "rids")         // ~160 hits (corner overlap)
        #expect(try choice(40.4, -73.6, 0.5, "createdAt") == "rtreeJoin")     // √66,000 ≈ 257 > 160
        #expect(try choice(40.05, -73.95, 0.45, "-createdAt") == "createdAtWalk")  // ~3,240 hits
        #expect(try choice(40.05, -73.95, 0.45, "createdAt") == "createdAtWalk")
    }
}

/// Deterministic test data (SplitMix64).
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
