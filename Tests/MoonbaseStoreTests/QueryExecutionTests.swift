import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Testing
@testable import MoonbaseStore

/// Finds on real SQLite: operators on scalars, arrays and missing fields, order, paging, count.
@Suite struct QueryExecutionTests {
    let fx: QueryFixture

    init() throws {
        fx = try QueryFixture()
        try fx.createClass("Item", fields: [
            "name": FieldInfo(type: .string), "n": FieldInfo(type: .number), "tags": FieldInfo(type: .array),
            "when": FieldInfo(type: .date), "flag": FieldInfo(type: .boolean), "owner": FieldInfo(type: .pointer, targetClass: "_User"),
            "meta": FieldInfo(type: .object),
        ], textIndexes: ["search": ["name"]])
        try fx.insert("Item", json(#"{"name":"apple pie","n":1,"tags":["a","b"],"flag":true,"owner":{"__type":"Pointer","className":"_User","objectId":"u1"},"when":{"__type":"Date","iso":"2026-01-01T00:00:00.000Z"},"meta":{"level":1}}"#), id: "i1")
        try fx.insert("Item", json(#"{"name":"Banana split","n":2,"tags":["b","c"],"flag":false,"owner":{"__type":"Pointer","className":"_User","objectId":"u2"},"when":{"__type":"Date","iso":"2026-02-01T00:00:00.000Z"},"meta":{"level":2}}"#), id: "i2")
        try fx.insert("Item", json(#"{"name":"cherry tart","n":3,"tags":[],"meta":{"level":2}}"#), id: "i3")
        try fx.insert("Item", json(#"{"name":"apple crumble","n":2}"#), id: "i4")
    }

    func ids(_ w: String, order: String? = "objectId") throws -> [String] { try fx.ids("Item", json(w), order: order) }

    @Test func scalarOperators() throws {
        #expect(try ids(#"{"n":2}"#) == ["i2", "i4"])
        #expect(try ids(#"{"n":{"$gt":1,"$lte":2}}"#) == ["i2", "i4"])
        #expect(try ids(#"{"n":{"$ne":2}}"#) == ["i1", "i3"])
        #expect(try ids(#"{"flag":true}"#) == ["i1"])
        #expect(try ids(#"{"flag":{"$ne":true}}"#) == ["i2", "i3", "i4"])
        #expect(try ids(#"{"objectId":{"$in":["i3","i1","zz"]}}"#) == ["i1", "i3"])
        #expect(try ids(#"{"meta.level":2}"#) == ["i2", "i3"])
        #expect(try ids(#"{"when":{"$gte":{"__type":"Date","iso":"2026-01-15T00:00:00Z"}}}"#) == ["i2"])
        #expect(try ids(#"{"owner":{"__type":"Pointer","className":"_User","objectId":"u2"}}"#) == ["i2"])
        #expect(try ids(#"{"owner":{"$in":[{"__type":"Pointer","className":"_User","objectId":"u1"}]}}"#) == ["i1"])
    }

    @Test func missingFieldsAndExists() throws {
        #expect(try ids(#"{"flag":{"$exists":false}}"#) == ["i3", "i4"])
        #expect(try ids(#"{"tags":{"$exists":true}}"#) == ["i1", "i2", "i3"])
        #expect(try ids(#"{"flag":null}"#) == ["i3", "i4"])
        #expect(try ids(#"{"n":{"$nin":[1,3]}}"#) == ["i2", "i4"])
        #expect(try ids(#"{"flag":{"$nin":[true]}}"#) == ["i2", "i3", "i4"])
        #expect(try ids(#"{"flag":{"$in":[null,true]}}"#) == ["i1", "i3", "i4"])
    }

    @Test func arrayOperators() throws {
        #expect(try ids(#"{"tags":"b"}"#) == ["i1", "i2"])
        #expect(try ids(#"{"tags":{"$in":["a","c"]}}"#) == ["i1", "i2"])
        #expect(try ids(#"{"tags":{"$nin":["a"]}}"#) == ["i2", "i3", "i4"])
        #expect(try ids(#"{"tags":{"$all":["b","c"]}}"#) == ["i2"])
        #expect(try ids(#"{"tags":{"$all":[]}}"#) == [])
        #expect(try ids(#"{"tags":{"$ne":"a"}}"#) == ["i2", "i3", "i4"])
        #expect(try ids(#"{"tags":["a","b"]}"#) == ["i1"])
    }

    @Test func orAndRegex() throws {
        #expect(try ids(#"{"$or":[{"n":1},{"tags":"c"}]}"#) == ["i1", "i2"])
        #expect(try ids(#"{"$and":[{"n":{"$gte":2}},{"$or":[{"name":"cherry tart"},{"flag":false}]}]}"#) == ["i2", "i3"])
        #expect(try ids(#"{"name":{"$regex":"^apple"}}"#) == ["i1", "i4"])
        #expect(try ids(#"{"name":{"$regex":"^banana","$options":"i"}}"#) == ["i2"])
        #expect(try ids(#"{"name":{"$regex":"^banana"}}"#) == [])
        #expect(try ids(#"{"name":{"$regex":"\\Q.*\\E"}}"#) == [])
        #expect(try ids(#"{"tags":{"$regex":"^c"}}"#) == ["i2"])
    }

    @Test func badRegexIsInvalidQuery() {
        #expect { try ids(#"{"name":{"$regex":"(a"}}"#) } throws: { ($0 as? ParseError)?.code == .invalidQuery }
    }

    @Test func textSearch() throws {
        #expect(try ids(#"{"name":{"$text":{"$search":{"$term":"apple"}}}}"#) == ["i1", "i4"])
        #expect(try ids(#"{"name":{"$text":{"$search":{"$term":"APPLE cru"}}}}"#) == ["i4"])
        #expect(try ids(#"{"name":{"$text":{"$search":{"$term":"apple","$caseSensitive":true}}}}"#) == ["i1", "i4"])
        #expect(try ids(#"{"name":{"$text":{"$search":{"$term":"Apple","$caseSensitive":true}}}}"#) == [])
        // FTS5 syntax in the term is just words: no error, no injection.
        #expect(try ids(#"{"name":{"$text":{"$search":{"$term":"apple OR NOT \"banana\" NEAR(x) *"}}}}"#) == [])
        #expect(try fx.ids("Item", json(#"{"name":{"$text":{"$search":{"$term":"apple"}}}}"#), order: "$score").count == 2)
    }

    @Test func orderLimitSkipCount() throws {
        #expect(try ids("{}", order: "-n,name") == ["i3", "i2", "i4", "i1"])  // binary collation: "B" < "a"
        #expect(try ids("{}", order: "n,-objectId") == ["i1", "i4", "i2", "i3"])
        #expect(try ids("{}", order: "-createdAt") == ["i4", "i3", "i2", "i1"])
        let page = try fx.find("Item", nil, order: "objectId", limit: 2, skip: 1, count: true)
        #expect(page.objects.map { $0["objectId"]?.stringValue } == ["i2", "i3"])
        #expect(page.count == 4)
        let onlyCount = try fx.find("Item", json(#"{"n":2}"#), limit: 0, count: true)
        #expect(onlyCount.objects.isEmpty && onlyCount.count == 2)
        let q = try FindQuery(className: "Item", rest: ["limit": "0", "count": "1"])
        let body = try fx.executor.find(q, identity: .master, on: fx.conn).responseBody()
        #expect(String(decoding: body, as: UTF8.self) == #"{"results":[],"count":4}"#)
    }

    @Test func serialisedShape() throws {
        let r = try fx.find("Item", json(#"{"objectId":"i4"}"#)).objects
        #expect(r.count == 1)
        let o = r[0]
        #expect(o["objectId"] == "i4" && o["name"] == "apple crumble" && o["n"] == 2)
        #expect(o["createdAt"]?.stringValue?.hasSuffix("Z") == true)
        #expect(o["ACL"] == nil)
        #expect(o["rperm"] == nil && o["data"] == nil)
    }

    @Test func keysProjection() throws {
        let r = try fx.find("Item", json(#"{"objectId":"i1"}"#), keys: "name,meta.level").objects[0]
        #expect(Set(r.keys) == ["objectId", "createdAt", "updatedAt", "name", "meta"])
        #expect(r["meta"] == ["level": 1])
    }

    @Test func distinctValues() throws {
        let n = try fx.executor.distinct(className: "Item", field: "n", where: nil, identity: .master, on: fx.conn)
        #expect(Set(n) == [1, 2, 3])
        let tags = try fx.executor.distinct(className: "Item", field: "tags", where: json(#"{"n":{"$lt":3}}"#), identity: .master, on: fx.conn)
        #expect(Set(tags) == ["a", "b", "c"])
        let none = try fx.executor.distinct(className: "Nope", field: "n", where: nil, identity: .master, on: fx.conn)
        #expect(none.isEmpty)
    }

    @Test func unknownClassIsEmpty() throws {
        let r = try fx.find("Nope", json(#"{"a":1}"#), count: true)
        #expect(r.objects.isEmpty && r.count == 0)
    }

    @Test func classNamesAreValidated() {
        let bad = "Item\" WHERE 1=1 --"
        #expect { try fx.executor.find(FindQuery(className: bad), identity: .master, on: fx.conn) } throws: {
            ($0 as? ParseError)?.code == .invalidClassName
        }
        #expect { try fx.executor.count(className: bad, where: nil, identity: .master, on: fx.conn) } throws: {
            ($0 as? ParseError)?.code == .invalidClassName
        }
    }

    @Test func orderRejectsBadFields() {
        #expect { try ids("{}", order: "a;b") } throws: { ($0 as? ParseError)?.code == .invalidKeyName }
        #expect { try ids("{}", order: "$score") } throws: { ($0 as? ParseError)?.code == .invalidQuery }
    }
}
