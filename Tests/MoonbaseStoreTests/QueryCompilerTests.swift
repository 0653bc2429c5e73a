import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Testing
@testable import MoonbaseStore

let postSchema = QuerySchema(className: "Post", fields: [
    "text": FieldInfo(type: .string), "likes": FieldInfo(type: .number), "tags": FieldInfo(type: .array),
    "author": FieldInfo(type: .pointer, targetClass: "_User"), "when": FieldInfo(type: .date),
    "location": FieldInfo(type: .geoPoint), "ok": FieldInfo(type: .boolean), "meta": FieldInfo(type: .object),
    "photo": FieldInfo(type: .file),
], textIndexes: ["search": ["text"]])

private func compile(_ w: String) throws(ParseError) -> CompiledWhere {
    try QueryCompiler(schema: postSchema).compile(json(w))
}

@Suite struct QueryCompilerTests {
    struct Case: CustomTestStringConvertible, Sendable {
        let whereJSON: String, sql: String, binds: [SQLiteValue]
        var testDescription: String { whereJSON }
    }

    static let cases: [Case] = [
        Case(whereJSON: #"{}"#, sql: "1", binds: []),
        Case(whereJSON: #"{"text":"hi"}"#, sql: "json_extract(data,'$.text') = ?", binds: [.text("hi")]),
        Case(whereJSON: #"{"likes":{"$gte":10,"$lt":20}}"#,
             sql: "json_extract(data,'$.likes') >= ? AND json_extract(data,'$.likes') < ?", binds: [.integer(10), .integer(20)]),
        Case(whereJSON: #"{"ok":true}"#, sql: "json_extract(data,'$.ok') = ?", binds: [.integer(1)]),
        Case(whereJSON: #"{"objectId":"abc"}"#, sql: "objectId = ?", binds: [.text("abc")]),
        Case(whereJSON: #"{"createdAt":{"$gt":{"__type":"Date","iso":"2026-01-01T00:00:00.000Z"}}}"#,
             sql: "createdAt > ?", binds: [.integer(1_767_225_600_000)]),
        Case(whereJSON: #"{"updatedAt":{"$lte":"2026-01-01T00:00:00Z"}}"#, sql: "updatedAt <= ?", binds: [.integer(1_767_225_600_000)]),
        Case(whereJSON: #"{"when":{"__type":"Date","iso":"2026-01-01T00:00:00Z"}}"#,
             sql: "json_extract(data,'$.when.iso') = ?", binds: [.text("2026-01-01T00:00:00.000Z")]),
        Case(whereJSON: #"{"author":{"__type":"Pointer","className":"_User","objectId":"u1"}}"#,
             sql: "json_extract(data,'$.author.objectId') = ?", binds: [.text("u1")]),
        Case(whereJSON: #"{"tags":"a"}"#, sql: "EXISTS(SELECT 1 FROM json_each(data,'$.tags') WHERE type='text' AND value = ?)", binds: [.text("a")]),
        Case(whereJSON: #"{"text":null}"#, sql: "json_extract(data,'$.text') IS NULL", binds: []),
        Case(whereJSON: #"{"text":{"$ne":"x"}}"#, sql: "coalesce(json_extract(data,'$.text') = ?,0)=0", binds: [.text("x")]),
        Case(whereJSON: #"{"text":{"$in":["a","b"]}}"#, sql: "json_extract(data,'$.text') IN (?,?)", binds: [.text("a"), .text("b")]),
        Case(whereJSON: #"{"text":{"$in":[]}}"#, sql: "0", binds: []),
        Case(whereJSON: #"{"text":{"$exists":true}}"#, sql: "json_type(data,'$.text') IS NOT NULL", binds: []),
        Case(whereJSON: #"{"text":{"$regex":"^a.c$","$options":"i"}}"#, sql: "regexp(?, json_extract(data,'$.text'), ?)", binds: [.text("^a.c$"), .text("i")]),
        Case(whereJSON: #"{"text":{"$regex":"^\\Qa.b\\E"}}"#, sql: "regexp(?, json_extract(data,'$.text'))", binds: [.text("^a\\.b")]),
        Case(whereJSON: #"{"$or":[{"likes":1},{"likes":2}]}"#,
             sql: "((json_extract(data,'$.likes') = ?) OR (json_extract(data,'$.likes') = ?))", binds: [.integer(1), .integer(2)]),
        Case(whereJSON: #"{"text":{"$text":{"$search":{"$term":"caf\" OR x*"}}}}"#,
             sql: "rid IN (SELECT rowid FROM \"Post__fts__search\" WHERE \"Post__fts__search\" MATCH ?)", binds: [.text("\"caf\"* \"OR\"* \"x\"*")]),
        Case(whereJSON: #"{"meta.level":3}"#, sql: "json_extract(data,'$.meta.level') = ?", binds: [.integer(3)]),
    ]

    @Test(arguments: cases)
    func compiles(_ c: Case) throws {
        let out = try compile(c.whereJSON)
        #expect(out.sql == c.sql)
        #expect(out.binds == c.binds)
    }

    struct Bad: CustomTestStringConvertible, Sendable {
        let whereJSON: String, code: Int, message: String?
        var testDescription: String { whereJSON }
    }

    static let bad: [Bad] = [
        Bad(whereJSON: #"{"likes":{"$foo":1}}"#, code: 102, message: "unknown operator $foo"),
        Bad(whereJSON: #"{"$where":"1=1"}"#, code: 102, message: "unknown operator $where"),
        Bad(whereJSON: #"{"a') OR 1=1 --":1}"#, code: 105, message: nil),
        Bad(whereJSON: #"{"text\"":1}"#, code: 105, message: nil),
        Bad(whereJSON: #"{"_hashed_password":"x"}"#, code: 105, message: nil),
        Bad(whereJSON: #"{"likes":"ten"}"#, code: 111, message: nil),
        Bad(whereJSON: #"{"when":{"$lt":"not a date"}}"#, code: 111, message: nil),
        Bad(whereJSON: #"{"text":{"$in":"a"}}"#, code: 102, message: "$in needs an array"),
        Bad(whereJSON: #"{"text":{"$exists":"yes"}}"#, code: 102, message: nil),
        Bad(whereJSON: #"{"text":{"$regex":5}}"#, code: 102, message: nil),
        Bad(whereJSON: #"{"text":{"$regex":"a","$options":"x"}}"#, code: 102, message: nil),
        Bad(whereJSON: #"{"likes":{"$text":{"$search":{"$term":"a"}}}}"#, code: 102, message: nil),
        Bad(whereJSON: #"{"text":{"$text":{"$search":{"$term":" -- "}}}}"#, code: 102, message: nil),
        Bad(whereJSON: #"{"location":{"$nearSphere":{"latitude":1}}}"#, code: 102, message: nil),
        Bad(whereJSON: #"{"location":{"$nearSphere":{"__type":"GeoPoint","latitude":91,"longitude":0}}}"#, code: 102, message: nil),
        Bad(whereJSON: #"{"text":{"$nearSphere":{"__type":"GeoPoint","latitude":1,"longitude":0}}}"#, code: 102, message: nil),
        Bad(whereJSON: #"{"location":{"$maxDistanceInMiles":5}}"#, code: 102, message: nil),
        Bad(whereJSON: #"{"$or":{}}"#, code: 102, message: nil),
        Bad(whereJSON: #"{"ACL":1}"#, code: 102, message: nil),
        Bad(whereJSON: #"[1]"#, code: 102, message: nil),
    ]

    @Test(arguments: bad)
    func rejects(_ b: Bad) {
        do {
            _ = try compile(b.whereJSON)
            Issue.record("expected error \(b.code)")
        } catch {
            #expect(error.code.rawValue == b.code)
            if let m = b.message { #expect(error.message == m) }
        }
    }

    @Test func longRegexRejected() {
        let w: JSONValue = ["text": ["$regex": .string(String(repeating: "a", count: 257))]]
        #expect(throws: ParseError.self) { try QueryCompiler(schema: postSchema).compile(w) }
    }

    @Test func deepNestingRejected() {
        var w: JSONValue = ["likes": 1]
        for _ in 0..<12 { w = ["$or": [w]] }
        #expect(throws: ParseError.self) { try QueryCompiler(schema: postSchema).compile(w) }
    }

    /// Values never reach the SQL text: hostile strings only ever appear in binds.
    @Test(arguments: ["' OR 1=1 --", "\"); DROP TABLE Post; --", "x') UNION SELECT * FROM _User --"])
    func valuesAreBound(_ hostile: String) throws {
        let w: JSONValue = ["$or": [["text": .string(hostile)], ["tags": ["$all": [.string(hostile)]]],
                                    ["text": ["$regex": .string(hostile)]], ["text": ["$in": [.string(hostile)]]]]]
        let out = try QueryCompiler(schema: postSchema).compile(w)
        #expect(!out.sql.contains(hostile))
        #expect(!out.sql.contains("DROP"))
        #expect(out.binds.contains(.text(hostile)))
    }

    @Test func geoIsRecordedWithResidual() throws {
        let out = try compile(#"{"likes":{"$gt":1},"location":{"$within":{"$box":[{"__type":"GeoPoint","latitude":40,"longitude":-74},{"__type":"GeoPoint","latitude":40.1,"longitude":-73.9}]},"$exists":true}}"#)
        let geo = try #require(out.geo)
        #expect(geo.boxes == [GeoBox(south: 40, north: 40.1, west: -74, east: -73.9)])
        #expect(geo.rtree == "\"Post__geo__location\"")
        #expect(out.residualSQL == "json_extract(data,'$.likes') > ? AND json_type(data,'$.location') IS NOT NULL")
        #expect(out.residualBinds == [.integer(1)])
        #expect(out.sql.contains("rid IN (SELECT id FROM \"Post__geo__location\""))
    }

    @Test func boxAcrossAntimeridianSplits() throws {
        let out = try compile(#"{"location":{"$within":{"$box":[{"__type":"GeoPoint","latitude":-10,"longitude":170},{"__type":"GeoPoint","latitude":10,"longitude":-170}]}}}"#)
        #expect(out.geo?.boxes.count == 2)
    }

    /// Geo SQL texts are shared per class, field and shape (`GeoTexts`): a later query of the same
    /// shape gets the same text with its own values, another class or field its own names.
    @Test func geoTextsAreSharedByShapeNotByValue() throws {
        let box = { (s: Double, w: Double) in
            #"{"location":{"$within":{"$box":[{"__type":"GeoPoint","latitude":\#(s),"longitude":\#(w)},{"__type":"GeoPoint","latitude":\#(s + 1),"longitude":\#(w + 1)}]}}}"#
        }
        let a = try compile(box(10, 20)), b = try compile(box(30, 40))
        #expect(a.sql == b.sql && a.geo?.rtreeExactSQL == b.geo?.rtreeExactSQL)
        #expect(a.binds == [.real(10), .real(11), .real(20), .real(21), .real(10), .real(11), .real(20), .real(21)])
        #expect(b.binds == [.real(30), .real(31), .real(40), .real(41), .real(30), .real(31), .real(40), .real(41)])
        #expect(b.geo?.rtreeExactBinds == [.real(30), .real(31), .real(40), .real(41), .real(30), .real(31), .real(40), .real(41)])
        // Across the antimeridian: two R*Tree searches; the exact test takes west > east.
        let split = try compile(#"{"location":{"$within":{"$box":[{"__type":"GeoPoint","latitude":1,"longitude":179.5},{"__type":"GeoPoint","latitude":2,"longitude":-179.5}]}}}"#)
        #expect(split.sql.components(separatedBy: "UNION ALL").count == 2 && split.sql.contains("geo_point_in_box(data,'location',?,?,?,?)"))
        #expect(split.binds.suffix(4) == [.real(1), .real(2), .real(179.5), .real(-179.5)])
        #expect(!a.sql.contains("UNION ALL"))
        // Another class, another field: their own table and JSON path.
        let place = QuerySchema(className: "Place", fields: ["spot": FieldInfo(type: .geoPoint)])
        let p = try QueryCompiler(schema: place).compile(json(box(10, 20).replacingOccurrences(of: "location", with: "spot")))
        #expect(p.sql.contains("\"Place__geo__spot\"") && p.sql.contains("geo_point_in_box(data,'spot',") && !p.sql.contains("location"))
        #expect(p.geo?.rtreeExactSQL.contains("FROM \"Place\" WHERE") == true)
        #expect(try compile(box(10, 20)).sql.contains("geo_point_in_box(data,'location',"))
        // A circle: the R*Tree-row test's binds are the inner and outer radius, then the exact test's.
        let near = try compile(#"{"location":{"$nearSphere":{"__type":"GeoPoint","latitude":1,"longitude":2},"$maxDistance":0.5}}"#)
        let g = try #require(near.geo)
        #expect(g.circle == GeoCircle(latitude: 1, longitude: 2, radians: 0.5))
        #expect(g.rtreeExactBinds == [.real(1), .real(2), .real(0.5 - QueryCompiler.rtreeMargin), .real(1), .real(2),
                                      .real(0.5 + QueryCompiler.rtreeMargin), .real(1), .real(2), .real(0.5)])
        #expect(g.rtreeExactSQL.hasPrefix("CASE WHEN geo_distance(r.minLat,r.minLng,?,?) <= ?"))
    }

    @Test func capBoxesNearPoleSpanAllLongitudes() {
        let b = QueryCompiler.boxes(aroundLatitude: 89.5, longitude: 10, radians: 0.02)
        #expect(b.count == 1 && b[0].west == -180 && b[0].east == 180 && b[0].north == 90)
        let m = QueryCompiler.boxes(aroundLatitude: 0, longitude: 179.9, radians: 0.01)
        #expect(m.count == 2)
    }

    @Test func unknownFieldMatchesNothingForGeo() throws {
        let out = try compile(#"{"nowhere":{"$nearSphere":{"__type":"GeoPoint","latitude":1,"longitude":2}}}"#)
        #expect(out.sql == "0")
    }

    @Test func ftsWordsAreQuoted() {
        #expect(QueryCompiler.ftsWords("NEAR(a b) \"c\" d* ^e") == ["NEAR", "a", "b", "c", "d", "e"])
        #expect(QueryCompiler.ftsWords("Crème brûlée") == ["Crème", "brûlée"])
    }

    @Test func quoteTranslation() {
        #expect(QueryCompiler.translateQuotes("^\\Q(a+b)*\\E$") == "^\\(a\\+b\\)\\*$")
        #expect(QueryCompiler.translateQuotes("\\Qx.y") == "x\\.y")
        #expect(QueryCompiler.translateQuotes("plain") == "plain")
    }
}
