import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore
import Testing

/// A create validated before the write transaction (`PreparedInsert`, what a batched REST create
/// does on its I/O thread) must store what the same body stores through `create`, with the same
/// checks: the ones that need the database (class permission, schema types, relation markers)
/// run when it is applied, against the schema as it is then.
@Suite(.timeLimit(.minutes(1)))
struct PreparedInsertTests {
    let f: StorageFixture
    let objects: ObjectService
    init() throws {
        f = try StorageFixture()
        objects = ObjectService(store: f.store)
    }

    /// Everything of a stored object but its objectId and times, as the master reads it.
    func shape(_ o: StoredObject) throws -> JSONObject {
        var j = try o.json(for: .master)
        for k in ["objectId", "createdAt", "updatedAt"] { j[k] = nil }
        return j
    }

    @Test func storesWhatTheBodyStores() throws {
        let bodies: [JSONObject] = [
            [:],
            ["title": "hi", "n": 3, "f": 1.5, "ok": true, "tags": ["a", "b"], "meta": ["k": ["x": 1]]],
            ["loc": ["__type": "GeoPoint", "latitude": 40.5, "longitude": -74.0], "title": "geo"],
            ["when": ["__type": "Date", "iso": "2026-12-06T10:00:00.000Z"], "ACL": ["*": ["read": true]]],
            ["ACL": .null, "n": ["__op": "Increment", "amount": 2]],
        ]
        for who in [Identity.anonymous, .user("u1"), .master] {
            for body in bodies {
                let viaBody = try objects.create("Post", body, caller: CallerContext(identity: who))
                let p = try PreparedInsert(className: "Post", fields: body)
                let viaPrepared = try objects.create(prepared: p, caller: CallerContext(identity: who))
                #expect(viaPrepared.objectId.utf8.count == 10 && viaPrepared.objectId != viaBody.objectId)
                #expect(try shape(viaPrepared) == (try shape(viaBody)), "\(body) as \(who)")
                let read = try #require(try f.store.get("Post", objectId: viaPrepared.objectId, identity: .master))
                #expect(read.data == viaPrepared.data && read.acl == viaPrepared.acl)
            }
        }
        // The geo row was written: a box around the point finds both creates.
        let q = FindQuery(className: "Post", where: ["loc": ["$within": ["$box": [
            ["__type": "GeoPoint", "latitude": 40.4, "longitude": -74.1],
            ["__type": "GeoPoint", "latitude": 40.6, "longitude": -73.9]]]]], limit: 100)
        #expect(try objects.find(q, caller: CallerContext(identity: .master)).resultCount == 6)
    }

    /// What the body alone can tell is refused when preparing (the caller then creates from the
    /// body, which answers the same error); what the database tells is refused when applied.
    @Test func refusesAsTheBodyIsRefused() throws {
        for (cls, body) in [("Post", ["objectId": "x"] as JSONObject), ("Post", ["bad-name": 1]),
                            ("Post", ["d": ["__type": "Date", "iso": "not a date"]]), ("9bad", ["a": 1]),
                            ("_Role", ["name": "r"])] {
            #expect(throws: ParseError.self, "\(cls) \(body)") { try PreparedInsert(className: cls, fields: body) }
        }
        _ = try objects.create("Typed", ["n": 1], caller: CallerContext(identity: .master))
        let p = try PreparedInsert(className: "Typed", fields: ["n": "one"])
        let e = #expect(throws: ParseError.self) { try objects.create(prepared: p, caller: CallerContext(identity: .master)) }
        #expect(e?.code.rawValue == 111)
        #expect(try f.store.find(FindQuery(className: "Typed", limit: 10), identity: .master).resultCount == 1)
        // A class permission set after the body was prepared applies.
        try f.store.setClassPermissions("Locked", ["create": ["role:admin": true]])
        let locked = try PreparedInsert(className: "Locked", fields: ["a": 1])
        let refused = #expect(throws: ParseError.self) { try objects.create(prepared: locked, caller: CallerContext(identity: .anonymous)) }
        #expect(refused?.code.rawValue == 119)
    }

    /// A Relation field added to the class after the body was prepared shows its marker on the
    /// new object, as a create from the body would.
    @Test func schemaChangesSincePreparingApply() throws {
        let p = try PreparedInsert(className: "Team", fields: ["name": "a"])
        _ = try objects.create("Team", ["members": ["__op": "AddRelation", "objects": [
            ["__type": "Pointer", "className": "_User", "objectId": "u1"]]]], caller: CallerContext(identity: .master))
        let o = try objects.create(prepared: p, caller: CallerContext(identity: .master))
        let j = try o.json(for: .master)
        #expect(j["name"] == .string("a"))
        #expect(j["members"] == .object(["__type": "Relation", "className": "_User"]))
    }
}
