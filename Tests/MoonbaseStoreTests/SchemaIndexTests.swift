import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
@testable import MoonbaseStore
import Testing

@Suite(.timeLimit(.minutes(1)))
struct SchemaIndexTests {
    let f: StorageFixture
    init() throws { f = try StorageFixture() }

    func count(_ sql: String, _ binds: [SQLiteValue] = []) throws -> Int64 {
        try f.database.read { (c) throws(ParseError) -> Int64 in
            if case .integer(let n)? = try c.scalar(sql, binds) { return n }
            return -1
        }
    }

    @Test func classTableLayoutAndTimeIndexes() throws {
        _ = try f.store.insert("Post", fields: ["a": 1], acl: nil, identity: .master)
        let cols = try f.database.read { (c) throws(ParseError) -> [String] in
            var out: [String] = []
            try c.query("SELECT name FROM pragma_table_info('Post') ORDER BY cid") { (r) throws(ParseError) in out.append(r.text(0)!) }
            return out
        }
        #expect(cols == ["rid", "objectId", "createdAt", "updatedAt", "ACL", "rperm", "wperm", "data"])
        #expect(try f.plan("SELECT rid FROM \"Post\" ORDER BY createdAt DESC LIMIT 5").contains("Post__createdAt"))
        #expect(try f.plan("SELECT rid FROM \"Post\" WHERE updatedAt > ?", [.integer(0)]).contains("Post__updatedAt"))
    }

    /// An index per field type: the planner uses it for exactly the expression queries emit.
    @Test(arguments: [
        ("s", JSONValue.string("x"), FieldType.string),
        ("n", JSONValue.int(3), FieldType.number),
        ("p", JSONValue(dictionaryLiteral: ("__type", "Pointer"), ("className", "_User"), ("objectId", "u1")), FieldType.pointer),
        ("d", JSONValue(dictionaryLiteral: ("__type", "Date"), ("iso", "2026-01-01T00:00:00Z")), FieldType.date),
        ("b", JSONValue.bool(true), FieldType.boolean),
    ])
    func expressionIndexMatchesQueryExpression(field: String, value: JSONValue, type: FieldType) throws {
        _ = try f.store.insert("Item", fields: JSONObject([.init(field, value)]), acl: nil, identity: .master)
        try f.store.setIndexes("Item", JSONObject([.init("by_\(field)", .object(JSONObject([.init(field, 1)])))]))
        let expr = Naming.fieldExpr(field, type: type)
        let plan = try f.plan("SELECT rid FROM \"Item\" AS t WHERE \(expr) = ?", [.text("x")])
        #expect(plan.contains("USING INDEX Item__idx__by_\(field)"), "\(plan)")
    }

    @Test func indexDeclaredBeforeDataIsRebuiltWhenTheTypeIsLearnt() throws {
        try f.store.setIndexes("Comment", ["by_post": ["post": 1, "createdAt": -1]])
        _ = try f.store.insert("Comment", fields: ["post": ["__type": "Pointer", "className": "Post", "objectId": "p1"]], acl: nil, identity: .master)
        let expr = Naming.fieldExpr("post", type: .pointer)
        #expect(expr == "json_extract(data,'$.post.objectId')")
        let plan = try f.plan("SELECT rid FROM \"Comment\" WHERE \(expr) = ? ORDER BY createdAt DESC", [.text("p1")])
        #expect(plan.contains("USING INDEX Comment__idx__by_post"), "\(plan)")
    }

    @Test func uniqueIndexRefusesDuplicates() throws {
        let pointer: (String) -> JSONValue = { ["__type": "Pointer", "className": "Post", "objectId": .string($0)] }
        _ = try f.store.insert("Reaction", fields: ["post": pointer("p1"), "user": pointer("u1")], acl: nil, identity: .master)
        try f.store.setIndexes("Reaction", ["one_per_user": ["fields": ["post": 1, "user": 1], "unique": true]])
        #expect(parseCode { try f.store.insert("Reaction", fields: ["post": pointer("p1"), "user": pointer("u1")], acl: nil, identity: .master) } == 137)
        let other = try f.store.insert("Reaction", fields: ["post": pointer("p1"), "user": pointer("u2")], acl: nil, identity: .master)
        #expect(parseCode { try f.store.update("Reaction", objectId: other.objectId, changes: ["user": pointer("u1")], identity: .master) } == 137)
        #expect(try count("SELECT count(*) FROM \"Reaction\"") == 2)
        // Existing duplicates make a new unique index fail with 137 and nothing changes.
        _ = try f.store.insert("Tag", fields: ["name": "a"], acl: nil, identity: .master)
        _ = try f.store.insert("Tag", fields: ["name": "a"], acl: nil, identity: .master)
        #expect(parseCode { try f.store.setIndexes("Tag", ["u": ["fields": ["name": 1], "unique": true]]) } == 137)
        #expect(f.store.schema("Tag")?.indexes["u"] == nil)
    }

    @Test func setIndexesIsIdempotentAndReplaces() throws {
        try f.store.setIndexes("Post", ["i": ["a": 1]])
        try f.store.setIndexes("Post", ["i": ["a": 1]])
        #expect(try count("SELECT count(*) FROM sqlite_master WHERE name = 'Post__idx__i'") == 1)
        try f.store.setIndexes("Post", ["i": ["a": -1, "b": 1]])
        let sql = try f.database.read { (c) throws(ParseError) in try c.scalar("SELECT sql FROM sqlite_master WHERE name = 'Post__idx__i'") }
        #expect(sql == .text("CREATE INDEX \"Post__idx__i\" ON \"Post\"(json_extract(data,'$.a') DESC, json_extract(data,'$.b'))"))
        try f.store.setIndexes("Post", ["i": ["__op": "Delete"]])
        #expect(try count("SELECT count(*) FROM sqlite_master WHERE name = 'Post__idx__i'") == 0)
        #expect(parseCode { try f.store.setIndexes("Post", ["bad name": ["a": 1]]) } == 105)
        #expect(parseCode { try f.store.setIndexes("Post", ["i": ["a'": 1]]) } == 105)
        #expect(parseCode { try f.store.setIndexes("Post", ["i": ["a": 2]]) } == 107)
        #expect(parseCode { try f.store.setIndexes("Post", ["i": ["a": "text", "b": 1]]) } == 107)
    }

    @Test func textIndexIsKeptInSync() throws {
        let a = try f.store.insert("Post", fields: ["text": "Café au lait near the river"], acl: nil, identity: .master)
        try f.store.setIndexes("Post", ["search": ["text": "text"]])  // back-fills existing rows
        let b = try f.store.insert("Post", fields: ["text": "Sunset drinks"], acl: nil, identity: .master)
        let fts = Naming.ftsTable("Post", "search")
        func hits(_ q: String) throws -> [Int64] {
            try f.database.read { (c) throws(ParseError) -> [Int64] in
                var out: [Int64] = []
                try c.query("SELECT rowid FROM \(fts) WHERE \(fts) MATCH ? ORDER BY rowid", [.text(q)]) { (r) throws(ParseError) in out.append(r.int64(0)) }
                return out
            }
        }
        #expect(try hits("cafe") == [a.rid])          // diacritics removed
        #expect(try hits("riv*") == [a.rid])          // prefix
        #expect(try hits("sunset") == [b.rid])
        _ = try f.store.update("Post", objectId: b.objectId, changes: ["text": "Morning coffee"], identity: .master)
        #expect(try hits("sunset") == [])
        #expect(try hits("coffee") == [b.rid])
        _ = try f.store.update("Post", objectId: b.objectId, changes: ["likes": ["__op": "Increment", "amount": 1]], identity: .master)
        #expect(try hits("coffee") == [b.rid])
        try f.store.delete("Post", objectId: a.objectId, identity: .master)
        #expect(try hits("cafe") == [])
        #expect(f.store.schema("Post")?.textIndexes == ["search": ["text"]])
    }

    @Test func geoPointsAreMirroredInTheRTree() throws {
        let p = try f.store.insert("Post", fields: ["location": ["__type": "GeoPoint", "latitude": 48.85, "longitude": 2.35]], acl: nil, identity: .master)
        let g = Naming.geoTable("Post", "location")
        func inBox(_ s: Double, _ n: Double, _ w: Double, _ e: Double) throws -> Int64 {
            try count("SELECT count(*) FROM \(g) WHERE minLat >= ? AND maxLat <= ? AND minLng >= ? AND maxLng <= ?",
                      [.real(s), .real(n), .real(w), .real(e)])
        }
        #expect(try inBox(48.8, 48.9, 2.3, 2.4) == 1)
        _ = try f.store.update("Post", objectId: p.objectId, changes: ["location": ["__type": "GeoPoint", "latitude": -33.9, "longitude": 151.2]], identity: .master)
        #expect(try inBox(48.8, 48.9, 2.3, 2.4) == 0)
        #expect(try inBox(-34, -33.8, 151, 151.3) == 1)
        _ = try f.store.update("Post", objectId: p.objectId, changes: ["location": ["__op": "Delete"]], identity: .master)
        #expect(try count("SELECT count(*) FROM \(g)") == 0)
        let q = try f.store.insert("Post", fields: ["location": ["__type": "GeoPoint", "latitude": 1, "longitude": 1]], acl: nil, identity: .master)
        #expect(try count("SELECT count(*) FROM \(g) WHERE id = ?", [.integer(q.rid)]) == 1)
        try f.store.delete("Post", objectId: q.objectId, identity: .master)
        #expect(try count("SELECT count(*) FROM \(g)") == 0)
    }

    @Test func getSchemaHasParseShape() throws {
        _ = try f.store.insert("Post", fields: ["text": "t", "author": ["__type": "Pointer", "className": "_User", "objectId": "u"]], acl: nil, identity: .master)
        try f.store.setIndexes("Post", ["by_author": ["author": 1]])
        let s = try #require(f.store.getSchema("Post"))
        #expect(s["className"] == "Post")
        #expect(s["fields"]?["author"] == ["type": "Pointer", "targetClass": "_User"])
        #expect(s["fields"]?["createdAt"] == ["type": "Date"])
        #expect(s["indexes"] == ["by_author": ["author": 1]])
        #expect(s["classLevelPermissions"]?["get"] == ["*": true])
        #expect(f.store.getSchema("Missing") == nil)
    }
}
