import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Testing
@testable import MoonbaseStore

/// ACL read filtering, include expansion (with ACLs, nesting, arrays, afterFind) and `_User` hiding.
@Suite struct QueryIncludeACLTests {
    let fx: QueryFixture

    init() throws {
        fx = try QueryFixture()
        try fx.createClass("_User", fields: ["username": FieldInfo(type: .string), "email": FieldInfo(type: .string)])
        try fx.createClass("Post", fields: ["text": FieldInfo(type: .string), "author": FieldInfo(type: .pointer, targetClass: "_User")])
        try fx.createClass("Comment", fields: [
            "post": FieldInfo(type: .pointer, targetClass: "Post"), "likers": FieldInfo(type: .array),
        ])
        try fx.insert("_User", json(#"{"username":"ann","email":"ann@x.io","_hashed_password":"$argon2id$secret"}"#), id: "uA")
        try fx.insert("_User", json(#"{"username":"bob","email":"bob@x.io","_hashed_password":"$argon2id$secret2"}"#), id: "uB", readers: ["uB"])
        try fx.insert("Post", json(#"{"text":"public","author":{"__type":"Pointer","className":"_User","objectId":"uA"}}"#), id: "p1")
        try fx.insert("Post", json(#"{"text":"bob only","author":{"__type":"Pointer","className":"_User","objectId":"uB"}}"#), id: "p2",
                      acl: json(#"{"uB":{"read":true,"write":true}}"#), readers: ["uB"])
        try fx.insert("Post", json(#"{"text":"everyone","author":{"__type":"Pointer","className":"_User","objectId":"uB"}}"#), id: "p3",
                      acl: json(#"{"*":{"read":true},"uB":{"write":true}}"#), readers: ["*", "uB"])
        try fx.insert("Comment", json(#"{"post":{"__type":"Pointer","className":"Post","objectId":"p2"},"likers":[{"__type":"Pointer","className":"_User","objectId":"uA"},{"__type":"Pointer","className":"_User","objectId":"uB"}]}"#), id: "c1")
        try fx.insert("Comment", json(#"{"post":{"__type":"Pointer","className":"Post","objectId":"p1"}}"#), id: "c2")
    }

    @Test func aclFiltersReads() throws {
        #expect(try fx.ids("Post", nil, order: "objectId", identity: .anonymous) == ["p1", "p3"])
        #expect(try fx.ids("Post", nil, order: "objectId", identity: .user("uA")) == ["p1", "p3"])
        #expect(try fx.ids("Post", nil, order: "objectId", identity: .user("uB")) == ["p1", "p2", "p3"])
        #expect(try fx.ids("Post", nil, order: "objectId", identity: .master) == ["p1", "p2", "p3"])
        #expect(try fx.executor.count(className: "Post", where: nil, identity: .anonymous, on: fx.conn) == 2)
        let p2 = try fx.find("Post", json(#"{"objectId":"p2"}"#), identity: .user("uB")).objects[0]
        #expect(p2["ACL"] == json(#"{"uB":{"read":true,"write":true}}"#))
    }

    @Test func includeRespectsACLAndHidesSecrets() throws {
        let anon = try fx.find("Post", nil, order: "objectId", include: "author", identity: .anonymous).objects
        #expect(anon.count == 2)
        let a1 = try #require(anon[0]["author"]?.objectValue)
        #expect(a1["__type"] == "Object" && a1["className"] == "_User" && a1["username"] == "ann")
        #expect(a1["_hashed_password"] == nil && a1["email"] == nil)
        // Bob's user row is readable only by Bob: it stays a Pointer for others.
        #expect(anon[1]["author"] == json(#"{"__type":"Pointer","className":"_User","objectId":"uB"}"#))
        let bob = try fx.find("Post", json(#"{"objectId":"p3"}"#), include: "author", identity: .user("uB")).objects[0]
        #expect(bob["author"]?["email"] == "bob@x.io")
        #expect(bob["author"]?["_hashed_password"] == nil)
    }

    @Test func nestedAndArrayIncludes() throws {
        let rows = try fx.find("Comment", nil, order: "objectId", include: "post.author,likers", identity: .user("uB")).objects
        let c1 = rows[0]
        #expect(c1["post"]?["__type"] == "Object")
        #expect(c1["post"]?["author"]?["username"] == "bob")
        #expect(c1["likers"]?.arrayValue?.map { $0["username"] } == ["ann", "bob"])
        // Anonymous: p2 is hidden, so the comment's post stays a Pointer; likers partly expanded.
        let anon = try fx.find("Comment", json(#"{"objectId":"c1"}"#), include: "post.author,likers", identity: .anonymous).objects[0]
        #expect(anon["post"]?["__type"] == "Pointer")
        #expect(anon["likers"]?.arrayValue?.map { $0["__type"] } == ["Object", "Pointer"])
    }

    @Test func afterFindRunsOnIncludedAndMainObjects() throws {
        nonisolated(unsafe) var seen: [String] = []  // the hook runs synchronously on this thread
        let hook: AfterFindHook = { (cls: String, objs: [JSONObject]) throws(ParseError) -> [JSONObject] in
            seen.append("\(cls):\(objs.count)")
            return objs.map { o in var o = o; o["seen"] = true; return o }
        }
        let rows = try fx.find("Post", json(#"{"objectId":"p1"}"#), include: "author", identity: .anonymous, afterFind: hook).objects
        #expect(seen == ["_User:1", "Post:1"])
        #expect(rows[0]["seen"] == true && rows[0]["author"]?["seen"] == true)
    }

    @Test func afterFindOnlyForClassesThatHaveIt() throws {
        nonisolated(unsafe) var seen: [String] = []  // the hook runs synchronously on this thread
        let hook: AfterFindHook = { (cls: String, objs: [JSONObject]) throws(ParseError) -> [JSONObject] in
            seen.append(cls)
            return objs.filter { $0["username"] != "ann" }
        }
        let q = try FindQuery(className: "Post", rest: ["include": "author", "order": "objectId"])
        let r = try fx.executor.find(q, identity: .anonymous, on: fx.conn, afterFind: hook, afterFindApplies: { $0 == "_User" })
        let rows = try r.objects()
        #expect(seen == ["_User"])
        // ann was dropped by the hook: her pointer stays a Pointer.
        #expect(rows[0]["author"]?["__type"] == "Pointer")
        // No include and no trigger on Post: the spliced path, hook untouched.
        seen = []
        let plain = try fx.executor.find(try FindQuery(className: "Post", rest: [:]), identity: .anonymous, on: fx.conn,
                                         afterFind: hook, afterFindApplies: { $0 == "_User" })
        #expect(plain.resultCount == 2 && seen.isEmpty)
    }

    @Test func keysWithInclude() throws {
        let r = try fx.find("Post", json(#"{"objectId":"p1"}"#), keys: "author.username", include: "author").objects[0]
        #expect(r["text"] == nil)
        let author = try #require(r["author"]?.objectValue)
        #expect(author["username"] == "ann" && author["email"] == nil && author["objectId"] == "uA")
    }

    @Test func usersNeverLeakPasswords() throws {
        let all = try fx.find("_User", nil, order: "objectId", identity: .master).objects
        #expect(all.count == 2)
        #expect(all.allSatisfy { $0["_hashed_password"] == nil })
        #expect(all[0]["email"] == "ann@x.io")  // master sees emails
        let anon = try fx.find("_User", nil, order: "objectId", identity: .user("uA")).objects
        #expect(anon.count == 1 && anon[0]["email"] == "ann@x.io")
        #expect(try fx.find("_User", nil, identity: .anonymous).objects.allSatisfy { $0["email"] == nil })
    }

    @Test func includeDepthLimited() {
        #expect(throws: ParseError.self) { try FindQuery(className: "Comment", rest: ["include": "a.b.c.d"]) }
    }
}
