import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
@testable import MoonbaseStore
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(1)))
struct StorageWriteTests {
    let f: StorageFixture
    init() throws { f = try StorageFixture() }

    @Test func insertReturnsParseShapedObject() throws {
        let o = try f.store.insert("Post", fields: ["text": "hello", "likes": 0], acl: nil, identity: .anonymous)
        #expect(o.objectId.utf8.count == 10)
        #expect(o.createdAt == f.clock.nowMillis() && o.updatedAt == o.createdAt)
        let text = String(decoding: o.jsonBytes(for: .anonymous), as: UTF8.self)
        #expect(text == "{\"objectId\":\"\(o.objectId)\",\"createdAt\":\"2026-09-21T14:13:20.000Z\",\"updatedAt\":\"2026-09-21T14:13:20.000Z\",\"text\":\"hello\",\"likes\":0}")
        let got = try f.store.get("Post", objectId: o.objectId, identity: .anonymous)
        #expect(got == o)
    }

    /// A create writes its R*Tree rows itself, from statement texts kept per class and key: two
    /// GeoPoint fields, one named as a statement might be keyed, each land in their own R*Tree.
    @Test func createsWriteEveryGeoPointsRTreeRow() throws {
        func point(_ lat: Double, _ lng: Double) -> JSONValue { ["__type": "GeoPoint", "latitude": .double(lat), "longitude": .double(lng)] }
        for i in 0..<3 {
            _ = try f.store.insert("Spot", fields: ["insert": point(10 + Double(i), 20), "at": point(-10, -20 - Double(i))],
                                   acl: nil, identity: .master)
        }
        _ = try f.store.insert("Spot", fields: ["name": "no point"], acl: nil, identity: .master)
        func rows(_ field: String) throws -> [String] {
            var out: [String] = []
            try f.store.database.read { (c) throws(ParseError) in
                try c.query("SELECT id, minLat, maxLng FROM \(Naming.geoTable("Spot", field)) ORDER BY id") { s in
                    out.append("\(s.int64(0)) \(s.double(1)) \(s.double(2))")
                }
            }
            return out
        }
        #expect(try rows("insert") == ["1 10.0 20.0", "2 11.0 20.0", "3 12.0 20.0"])
        #expect(try rows("at") == ["1 -10.0 -20.0", "2 -10.0 -21.0", "3 -10.0 -22.0"])
    }

    @Test func typedValuesRoundTripCanonically() throws {
        let body = try StorageFixture.obj("""
            {"when":{"__type":"Date","iso":"2026-11-29T21:23:45+01:00"},
             "at":{"__type":"GeoPoint","latitude":48.85,"longitude":2.35},
             "author":{"__type":"Pointer","className":"_User","objectId":"u1"},
             "photo":{"__type":"File","name":"a.jpg","url":"http://x/a.jpg"},
             "tags":["a",{"__type":"Date","iso":"2026-01-01"}],
             "meta":{"n":1,"deep":{"ok":true}}}
            """)
        let o = try f.store.insert("Thing", fields: body, acl: nil, identity: .master)
        let j = try f.json(o)
        #expect(j["when"] == ["__type": "Date", "iso": "2026-11-29T20:23:45.000Z"])
        #expect(j["at"] == ["__type": "GeoPoint", "latitude": 48.85, "longitude": 2.35])
        #expect(j["author"] == ["__type": "Pointer", "className": "_User", "objectId": "u1"])
        #expect(j["photo"]?["name"] == "a.jpg")
        #expect(j["tags"]?.arrayValue?[1] == ["__type": "Date", "iso": "2026-01-01T00:00:00.000Z"])
        #expect(j["meta"]?["deep"]?["ok"] == true)
        let s = try #require(f.store.schema("Thing"))
        #expect(s.fields["when"]?.type == .date)
        #expect(s.fields["at"]?.type == .geoPoint)
        #expect(s.fields["author"] == FieldInfo(type: .pointer, targetClass: "_User"))
        #expect(s.fields["tags"]?.type == .array && s.fields["meta"]?.type == .object)
    }

    @Test func badTypedValuesAreRefused() throws {
        #expect(parseCode { try f.store.insert("T", fields: ["d": ["__type": "Date", "iso": "yesterday"]], acl: nil, identity: .master) } == 111)
        #expect(parseCode { try f.store.insert("T", fields: ["g": ["__type": "GeoPoint", "latitude": 91, "longitude": 0]], acl: nil, identity: .master) } == 111)
        #expect(parseCode { try f.store.insert("T", fields: ["g": ["__type": "GeoPoint", "latitude": "1", "longitude": 0]], acl: nil, identity: .master) } == 111)
        #expect(parseCode { try f.store.insert("T", fields: ["p": ["__type": "Pointer", "className": "x y", "objectId": "1"]], acl: nil, identity: .master) } == 106)
        #expect(parseCode { try f.store.insert("T", fields: ["o": ["$where": 1]], acl: nil, identity: .master) } == 105)
        #expect(parseCode { try f.store.insert("T", fields: ["o": ["a.b": 1]], acl: nil, identity: .master) } == 105)
        #expect(parseCode { try f.store.insert("T", fields: ["objectId": "abc"], acl: nil, identity: .master) } == 105)
    }

    @Test func fieldKeepsItsFirstType() throws {
        let o = try f.store.insert("Post", fields: ["likes": 1], acl: nil, identity: .master)
        do {
            _ = try f.store.insert("Post", fields: ["likes": "many"], acl: nil, identity: .master)
            Issue.record("mismatch accepted")
        } catch {
            #expect(error.code == .incorrectType)
            #expect(error.message == "schema mismatch for Post.likes; expected Number but got String")
        }
        #expect(parseCode { try f.store.update("Post", objectId: o.objectId, changes: ["likes": true], identity: .master) } == 111)
        #expect(parseCode { try f.store.insert("Post", fields: ["who": ["__type": "Pointer", "className": "_User", "objectId": "a"]], acl: nil, identity: .master) } == nil)
        #expect(parseCode { try f.store.insert("Post", fields: ["who": ["__type": "Pointer", "className": "Post", "objectId": "a"]], acl: nil, identity: .master) } == 111)
    }

    @Test(arguments: ["Post\"; DROP TABLE x; --", "a b", "1abc", "_mb_schema", "Post__geo__x", "", "x'y", "_Secret"])
    func invalidClassNamesAreRefused(_ name: String) throws {
        #expect(parseCode { try f.store.insert(name, fields: ["a": 1], acl: nil, identity: .master) } == 103)
    }

    @Test(arguments: ["a'b", "x\") FROM t; --", "$set", "a.b", "_hashed_password", "1x", "a-b", ""])
    func invalidFieldNamesAreRefused(_ name: String) throws {
        #expect(parseCode { try f.store.insert("Post", fields: JSONObject([.init(name, 1)]), acl: nil, identity: .master) } == 105)
        let o = try f.store.insert("Post", fields: ["ok": 1], acl: nil, identity: .master)
        if name == "a.b" { return }  // a nested key: valid in updates (nestedKeysUpdateInsideObjects)
        #expect(parseCode { try f.store.update("Post", objectId: o.objectId, changes: JSONObject([.init(name, 1)]), identity: .master) } == 105)
    }

    @Test func injectionInValuesAndIdsStaysData() throws {
        let evil = "x'); DROP TABLE \"Post\"; --"
        let o = try f.store.insert("Post", fields: ["text": .string(evil)], acl: nil, identity: .master)
        #expect(try f.json(o)["text"] == .string(evil))
        #expect(parseCode { try f.store.update("Post", objectId: evil, changes: ["text": "y"], identity: .master) } == 101)
        #expect(try f.store.get("Post", objectId: o.objectId, identity: .master) != nil)
    }

    @Test func updateOperatorsApplyInSQL() throws {
        let o = try f.store.insert("Post", fields: ["likes": 1, "tags": ["a"], "gone": "x", "score": 1.5], acl: nil, identity: .master)
        let u = try f.store.update("Post", objectId: o.objectId, changes: try StorageFixture.obj("""
            {"likes":{"__op":"Increment","amount":2},"score":{"__op":"Increment","amount":-0.5},
             "tags":{"__op":"AddUnique","objects":["a","b","b"]},"gone":{"__op":"Delete"},
             "list":{"__op":"Add","objects":[1,1]},"text":"new","flag":true}
            """), identity: .master)
        let j = try f.json(u)
        #expect(j["likes"] == 3)
        #expect(j["score"]?.doubleValue == 1.0)
        #expect(j["tags"] == ["a", "b"])
        #expect(j["gone"] == nil)
        #expect(j["list"] == [1, 1])
        #expect(j["text"] == "new" && j["flag"] == true)
        let r = try f.store.update("Post", objectId: o.objectId, changes: ["list": ["__op": "Remove", "objects": [1]], "tags": ["__op": "Remove", "objects": ["a"]]], identity: .master)
        #expect(try f.json(r)["list"] == [])
        #expect(try f.json(r)["tags"] == ["b"])
        #expect(parseCode { try f.store.update("Post", objectId: o.objectId, changes: ["text": ["__op": "Increment", "amount": 1]], identity: .master) } == 111)
        #expect(parseCode { try f.store.update("Post", objectId: o.objectId, changes: ["likes": ["__op": "Increment", "amount": "1"]], identity: .master) } == 111)
        #expect(parseCode { try f.store.update("Post", objectId: o.objectId, changes: ["likes": ["__op": "Explode"]], identity: .master) } == 111)
    }

    @Test func nestedKeysUpdateInsideObjects() throws {
        let o = try f.store.insert("Post", fields: ["stats": ["views": 1, "keep": "k"]], acl: nil, identity: .master)
        let u = try f.store.update("Post", objectId: o.objectId, changes: try StorageFixture.obj("""
            {"stats.views":{"__op":"Increment","amount":2},"stats.by.day":5,"meta.first":true}
            """), identity: .master)
        let j = try f.json(u)
        #expect(j["stats"] == ["views": 3, "keep": "k", "by": ["day": 5]])
        #expect(j["meta"] == ["first": true])
        #expect(f.store.schema("Post")?.fields["meta"]?.type == .object)
        let d = try f.store.update("Post", objectId: o.objectId, changes: ["stats.keep": ["__op": "Delete"]], identity: .master)
        #expect(try f.json(d)["stats"] == ["views": 3, "by": ["day": 5]])
        _ = try f.store.update("Post", objectId: o.objectId, changes: ["title": "t"], identity: .master)
        #expect(parseCode { try f.store.update("Post", objectId: o.objectId, changes: ["title.x": 1], identity: .master) } == 111)
        #expect(parseCode { try f.store.update("Post", objectId: o.objectId, changes: ["stats..x": 1], identity: .master) } == 105)
    }

    @Test func storeTransactionIsAtomic() throws {
        let o = try f.store.insert("Post", fields: ["likes": 0], acl: nil, identity: .master)
        let code = parseCode {
            try f.store.transaction { () throws(ParseError) in
                _ = try f.store.update("Post", objectId: o.objectId, changes: ["likes": ["__op": "Increment", "amount": 1]], identity: .master)
                _ = try f.store.insert("Comment", fields: ["text": "x"], acl: nil, identity: .master)
                throw ParseError(.validationError, "abort")
            }
        }
        #expect(code == 142)
        #expect(try f.store.get("Post", objectId: o.objectId, identity: .master)?.fields()["likes"] == 0)
        #expect(f.store.schema("Comment") == nil)
    }

    @Test func concurrentIncrementsAreExact() throws {
        let o = try f.store.insert("Post", fields: ["likes": 0], acl: nil, identity: .master)
        let store = f.store
        let threads = 4, per = 100
        let failures = LockedBox(0)
        runConcurrently(threads) { _ in
            for _ in 0..<per {
                do {
                    _ = try store.update("Post", objectId: o.objectId, changes: ["likes": ["__op": "Increment", "amount": 1]], identity: .master)
                } catch {
                    failures.update { $0 += 1 }
                }
            }
        }
        #expect(failures.get() == 0)
        let final = try #require(try f.store.get("Post", objectId: o.objectId, identity: .master))
        #expect(try final.fields()["likes"] == .int(Int64(threads * per)))
    }

    @Test func aclDefaultsAndWriteRefusal() throws {
        let mine = try f.store.insert("Post", fields: ["t": 1], acl: nil, identity: .user("alice"))
        #expect(try f.json(mine)["ACL"] == ["*": ["read": true], "alice": ["read": true, "write": true]])
        let anon = try f.store.insert("Post", fields: ["t": 2], acl: nil, identity: .anonymous)
        #expect(anon.acl == nil)
        let master = try f.store.insert("Post", fields: ["t": 3], acl: nil, identity: .master)
        #expect(master.acl == nil)
        // Others may read alice's object but not write it: 101 as if it did not exist.
        #expect(try f.store.get("Post", objectId: mine.objectId, identity: .user("bob")) != nil)
        #expect(parseCode { try f.store.update("Post", objectId: mine.objectId, changes: ["t": 9], identity: .user("bob")) } == 101)
        #expect(parseCode { try f.store.update("Post", objectId: mine.objectId, changes: ["t": 9], identity: .anonymous) } == 101)
        #expect(parseCode { try f.store.delete("Post", objectId: mine.objectId, identity: .user("bob")) } == 101)
        #expect(try f.store.update("Post", objectId: mine.objectId, changes: ["t": 9], identity: .user("alice")).objectId == mine.objectId)
        // A private object is invisible to others.
        let secret = try f.store.insert("Post", fields: ["t": 4], acl: ["alice": ["read": true, "write": true]], identity: .user("alice"))
        #expect(try f.store.get("Post", objectId: secret.objectId, identity: .user("bob")) == nil)
        #expect(try f.store.get("Post", objectId: secret.objectId, identity: .anonymous) == nil)
        #expect(try f.store.get("Post", objectId: secret.objectId, identity: .master) != nil)
        // Bad ACLs: 123.
        #expect(parseCode { try f.store.insert("Post", fields: ["t": 5], acl: ["alice": ["read": "yes"]], identity: .master) } == 123)
        #expect(parseCode { try f.store.insert("Post", fields: ["t": 5], acl: "public", identity: .master) } == 123)
        #expect(parseCode { try f.store.update("Post", objectId: anon.objectId, changes: ["ACL": ["x y": ["read": true]]], identity: .master) } == 123)
        // Anonymous objects are public write; master deletes anything.
        try f.store.delete("Post", objectId: anon.objectId, identity: .anonymous)
        try f.store.delete("Post", objectId: secret.objectId, identity: .master)
        #expect(parseCode { try f.store.delete("Post", objectId: secret.objectId, identity: .master) } == 101)
    }

    @Test func classLevelPermissions() throws {
        try f.store.setClassPermissions("Reaction", ["create": [:], "update": [:]])
        #expect(parseCode { try f.store.insert("Reaction", fields: ["kind": "like"], acl: nil, identity: .user("u1")) } == 119)
        let r = try f.store.insert("Reaction", fields: ["kind": "like"], acl: nil, identity: .master)
        #expect(parseCode { try f.store.update("Reaction", objectId: r.objectId, changes: ["kind": "dislike"], identity: .anonymous) } == 119)
        try f.store.setClassPermissions("Comment", ["create": ["requiresAuthentication": true], "addField": ["admin": true]])
        #expect(parseCode { try f.store.insert("Comment", fields: [:], acl: nil, identity: .anonymous) } == 119)
        #expect(parseCode { try f.store.insert("Comment", fields: [:], acl: nil, identity: .user("u1")) } == nil)
        #expect(parseCode { try f.store.insert("Comment", fields: ["text": "new field"], acl: nil, identity: .user("u1")) } == 119)
        #expect(parseCode { try f.store.insert("Comment", fields: ["text": "new field"], acl: nil, identity: .user("admin")) } == nil)
        #expect(parseCode { try f.store.insert("_Session", fields: ["a": 1], acl: nil, identity: .user("u1")) } == 119)
        #expect(parseCode { try f.store.checkCLP(.find, "_JobStatus", .anonymous) } == 119)
        #expect(parseCode { try f.store.setClassPermissions("Post", ["destroy": ["*": true]]) } == 107)
        let clp = f.store.getSchema("Reaction")?["classLevelPermissions"]
        #expect(clp?["create"] == [:] && clp?["find"] == ["*": true])
    }

    @Test func userSerialisationHidesSecrets() throws {
        let u = try f.store.database.write { (tx) throws(ParseError) in
            try tx.insert("_User", fields: ["username": "ann", "email": "ann@example.com", "_hashed_password": "$argon2id$x"],
                          identity: .anonymous, allowInternalFields: true)
        }
        #expect(try f.json(u)["ACL"] == ["*": ["read": true], .init(stringLiteral: u.objectId): ["read": true, "write": true]])
        for viewer in [Identity.anonymous, .user("other"), .user(u.objectId), .master] {
            let text = String(decoding: u.jsonBytes(for: viewer), as: UTF8.self)
            #expect(!text.contains("_hashed_password") && !text.contains("argon2"))
            #expect(text.contains("ann@example.com") == (viewer == .master || viewer == .user(u.objectId)))
        }
        #expect(parseCode { try f.store.insert("_User", fields: ["_hashed_password": "x"], acl: nil, identity: .master) } == 105)
    }

    @Test func failedWriteLeavesNoSchemaBehind() throws {
        _ = parseCode {
            try f.store.database.write { (tx) throws(ParseError) in
                _ = try tx.insert("Ghost", fields: ["a": 1], identity: .master)
                #expect(f.store.schema("Ghost") != nil)  // the writer sees its own new class
                throw ParseError(.validationError, "abort")
            }
        }
        #expect(f.store.schema("Ghost") == nil)
        try f.store.catalog.reload()
        #expect(f.store.schema("Ghost") == nil)
        // The schema survives a reload once committed.
        _ = try f.store.insert("Real", fields: ["a": 1], acl: nil, identity: .master)
        try f.store.catalog.reload()
        #expect(f.store.schema("Real")?.fields["a"]?.type == .number)
    }

    @Test func setBasedUpdateAndDelete() throws {
        for i in 0..<10 { _ = try f.store.insert("Job", fields: ["n": .int(Int64(i))], acl: nil, identity: .master) }
        let lowN = CompiledWhere(sql: "json_extract(t.data,'$.n') < ?", binds: [.integer(5)])
        #expect(try f.store.updateWhere("Job", where: lowN, changes: ["n": ["__op": "Increment", "amount": 100]], identity: .master) == 5)
        let big = CompiledWhere(sql: "json_extract(t.data,'$.n') >= ?", binds: [.integer(100)])
        #expect(try f.store.deleteWhere("Job", where: big, identity: .master) == 5)
        #expect(try f.store.deleteWhere("Nope", where: .all, identity: .master) == 0)
        #expect(try f.store.deleteWhere("Job", where: .all, identity: .anonymous) == 5)
    }
}

/// `SQLiteDocumentStore.groupCommit`: parts share one transaction; a part that fails is undone
/// alone, with the commit actions it registered; nothing is visible elsewhere before the commit.
@Suite(.timeLimit(.minutes(1)))
struct GroupCommitTests {
    let f: StorageFixture
    init() throws { f = try StorageFixture() }

    @Test func aFailedPartIsUndoneAloneAndTheRestCommitsOnce() throws {
        let seen = GroupCommitSeen()
        let store = f.store
        try store.groupCommit(3) { i in seen.part(store, i) }
        let ids = seen.ids
        #expect(ids.count == 3)
        #expect(seen.seenElsewhere == false)
        #expect(seen.ran.withLock { $0 } == ["part 0", "part 2"])
        let kept0 = try store.get("Part", objectId: ids[0], identity: .master) != nil
        let kept1 = try store.get("Part", objectId: ids[1], identity: .master) != nil
        let kept2 = try store.get("Part", objectId: ids[2], identity: .master) != nil
        #expect(kept0 && !kept1 && kept2)
    }
}

/// What the parts of `aFailedPartIsUndoneAloneAndTheRestCommitsOnce` did.
final class GroupCommitSeen: @unchecked Sendable {
    var ids: [String] = []
    var seenElsewhere: Bool?
    let ran = Mutex<[String]>([])

    /// Part `i` inserts one object and registers a commit action; part 1 then fails, after
    /// checking that part 0's object is not visible to another thread before the commit.
    func part(_ store: SQLiteDocumentStore, _ i: Int) -> Bool {
        let o: StoredObject
        do {
            o = try store.insert("Part", fields: ["i": .int(Int64(i))], acl: nil, identity: .master)
        } catch {
            return false
        }
        ids.append(o.objectId)
        store.afterCommit { self.ran.withLock { $0.append("part \(i)") } }
        guard i == 1 else { return true }
        let first = ids[0]
        runConcurrently(1) { _ in
            do { self.seenElsewhere = try store.get("Part", objectId: first, identity: .master) != nil } catch { self.seenElsewhere = true }
        }
        return false
    }
}
