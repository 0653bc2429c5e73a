import MoonbaseCore
import MoonbaseJSON
import MoonbaseRealtime
import MoonbaseStore
import Testing

/// The live matcher must agree with REST find (the SQL compiler) on every object: random
/// objects, random wheres, both evaluated, results compared.
@Suite(.timeLimit(.minutes(2)))
struct LiveMatcherDifferentialTests {
    struct RNG {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func int(_ n: Int) -> Int { Int(next() % UInt64(n)) }
        mutating func pick<T>(_ a: [T]) -> T { a[int(a.count)] }
        mutating func chance(_ p: Int) -> Bool { int(100) < p }
    }

    static let strings: [JSONValue] = ["a", "b", "ab", "B", "abc", "", "zeta"]
    static let dates = ["2026-01-01T00:00:00.000Z", "2026-06-15T12:00:00.000Z", "2027-03-01T08:30:00.000Z"]
    static func date(_ s: String) -> JSONValue { ["__type": "Date", "iso": .string(s)] }
    static func ptr(_ id: String) -> JSONValue { ["__type": "Pointer", "className": "_User", "objectId": .string(id)] }
    static func geo(_ lat: Double, _ lng: Double) -> JSONValue { ["__type": "GeoPoint", "latitude": .double(lat), "longitude": .double(lng)] }

    static func randomObject(_ r: inout RNG) -> JSONObject {
        var o = JSONObject()
        if r.chance(85) { o["n"] = r.chance(70) ? .int(Int64(r.int(10))) : .double(Double(r.int(20)) / 2) }
        if r.chance(85) { o["s"] = r.pick(strings) }
        if r.chance(80) { o["b"] = .bool(r.chance(50)) }
        if r.chance(80) {
            var tags: [JSONValue] = []
            for _ in 0..<r.int(4) { tags.append(r.chance(80) ? r.pick(["x", "y", "z"]) : .int(Int64(r.int(3)))) }
            o["tags"] = .array(tags)
        }
        if r.chance(80) { o["d"] = date(r.pick(dates)) }
        if r.chance(80) { o["p"] = ptr(r.pick(["u1", "u2", "u3"])) }
        if r.chance(80) { o["loc"] = geo(Double(r.int(20)) / 10, Double(r.int(20)) / 10) }
        if r.chance(70) { o["o"] = ["k": .int(Int64(r.int(5))), "t": r.pick(strings)] }
        return o
    }

    static func randomConstraint(_ r: inout RNG, ids: [String]) -> (String, JSONValue) {
        switch r.int(24) {
        case 0: return ("n", .int(Int64(r.int(10))))
        case 1: return ("n", [r.pick(["$gt", "$gte", "$lt", "$lte"]): .int(Int64(r.int(10)))])
        case 2: return ("n", ["$ne": .int(Int64(r.int(10)))])
        case 3: return ("n", [r.pick(["$in", "$nin"]): [.int(Int64(r.int(10))), .double(2.5), .int(7)]])
        case 4: return (r.pick(["n", "s", "tags", "o", "zz", "o.k"]), ["$exists": .bool(r.chance(50))])
        case 5: return ("s", r.pick(strings))
        case 6: return ("s", ["$regex": r.pick(["^a", "b$", "^$", "a.c", "\\Qa\\E"]), "$options": r.chance(50) ? "i" : ""])
        case 7: return ("s", [r.pick(["$gt", "$lt"]): r.pick(strings)])
        case 8: return ("s", [r.pick(["$in", "$nin"]): [r.pick(strings), r.pick(strings)]])
        case 9: return ("b", .bool(r.chance(50)))
        case 10: return ("b", ["$ne": .bool(r.chance(50))])
        case 11: return ("tags", r.pick(["x", "y", "z"]))
        case 12: return ("tags", ["$all": [r.pick(["x", "y"]), r.pick(["y", "z"])]])
        case 13: return ("tags", [r.pick(["$in", "$nin"]): [r.pick(["x", "y", "z"]), .int(1)]])
        case 14: return ("tags", ["x", "y"])
        case 15: return ("d", [r.pick(["$lt", "$gte", "$gt", "$lte"]): date(r.pick(dates))])
        case 16: return ("d", date(r.pick(dates)))
        case 17: return ("p", r.chance(50) ? ptr(r.pick(["u1", "u2"])) : ["$in": [ptr("u1"), ptr("u3")]])
        case 18: return ("p", ["$ne": ptr(r.pick(["u1", "u2"]))])
        case 19: return ("loc", ["$nearSphere": geo(1, 1), "$maxDistanceInKilometers": .double(Double(r.int(150)))])
        case 20: return ("loc", ["$within": ["$box": [geo(0.2, 0.2), geo(Double(r.int(20)) / 10, 1.5)]]])
        case 21: return ("loc", ["$geoWithin": ["$centerSphere": [geo(0.5, 0.5), .double(Double(r.int(20)) / 1000)]]])
        case 22: return (r.pick(["o.k", "o.t"]), r.chance(50) ? .int(Int64(r.int(5))) : r.pick(strings))
        default:
            return (r.chance(50) ? "objectId" : "n", r.chance(50) ? .string(r.pick(ids)) : ["$in": [.string(r.pick(ids)), .string(r.pick(ids))]])
        }
    }

    static func randomWhere(_ r: inout RNG, ids: [String], depth: Int = 0) -> JSONObject {
        var w = JSONObject()
        for _ in 0..<(1 + r.int(2)) {
            let (k, v) = randomConstraint(&r, ids: ids)
            w[k] = v
        }
        if depth < 2, r.chance(30) {
            let subs = (0..<(1 + r.int(2))).map { _ in JSONValue.object(randomWhere(&r, ids: ids, depth: depth + 1)) }
            w[r.pick(["$or", "$and"])] = .array(subs)
        }
        return w
    }

    @Test func matcherAgreesWithRESTFind() throws {
        let f = try RealtimeFixture()
        var r = RNG(state: 20261201)
        var objects: [JSONObject] = []
        for _ in 0..<150 {
            let stored = try f.store.insert("Thing", fields: Self.randomObject(&r), acl: nil, identity: .master)
            objects.append(try stored.json(for: .master))
        }
        let ids = objects.compactMap { $0["objectId"]?.stringValue }
        let schema = f.store.catalog.schema("Thing").map { QuerySchema(className: $0.className, fields: $0.fields) }
        var compared = 0, matchedSome = 0
        for _ in 0..<400 {
            let w = JSONValue.object(Self.randomWhere(&r, ids: ids))
            let expected: Set<String>
            do { expected = try f.findIds("Thing", w) } catch { continue }  // REST refuses it: not comparable
            let m = try LiveMatcher(className: "Thing", where: w, schema: schema)
            let got = Set(objects.filter { m.matches($0) }.compactMap { $0["objectId"]?.stringValue })
            #expect(got == expected, "where \(JSON.encodeString(w)): live \(got.subtracting(expected)) extra, \(expected.subtracting(got)) missing")
            compared += 1
            if !expected.isEmpty && expected.count < objects.count { matchedSome += 1 }
        }
        // The generator must exercise real selections, not only everything/nothing.
        #expect(compared > 300)
        #expect(matchedSome > 150)
    }

    @Test func norIsTheNegationOfOr() throws {
        let f = try RealtimeFixture()
        var r = RNG(state: 7)
        var objects: [JSONObject] = []
        for _ in 0..<60 { objects.append(try f.store.insert("Thing", fields: Self.randomObject(&r), acl: nil, identity: .master).json(for: .master)) }
        for _ in 0..<50 {
            let subs = JSONValue.array([.object(Self.randomWhere(&r, ids: ["none"])), .object(Self.randomWhere(&r, ids: ["none"]))])
            let or = try LiveMatcher(className: "Thing", where: ["$or": subs])
            let nor = try LiveMatcher(className: "Thing", where: ["$nor": subs])
            for o in objects { #expect(or.matches(o) != nor.matches(o)) }
        }
    }

    @Test func operatorsThatNeedOtherObjectsAreRefused() {
        for op in ["$inQuery", "$notInQuery", "$select", "$dontSelect"] {
            #expect(throws: ParseError.self) { try LiveMatcher(className: "T", where: ["post": [op: ["className": "P", "where": [:]]]]) }
        }
        #expect(throws: ParseError.self) { try LiveMatcher(className: "T", where: ["$relatedTo": ["object": [:], "key": "k"]]) }
        #expect(throws: ParseError.self) { try LiveMatcher(className: "T", where: ["title": ["$text": ["$search": ["$term": "x"]]]]) }
        #expect(throws: ParseError.self) { try LiveMatcher(className: "T", where: ["n": ["$bogus": 1]]) }
        #expect(throws: ParseError.self) { try LiveMatcher(className: "T", where: ["$or": [["a": ["$inQuery": [:]]]]]) }
    }
}
