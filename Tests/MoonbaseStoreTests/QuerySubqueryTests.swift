import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Testing
@testable import MoonbaseStore

/// The compiler's inner queries, `$nor`, `$containedBy`, Polygon operators and role-aware
/// read filters, on real SQLite through `QueryFixture`.
@Suite struct QuerySubqueryTests {
    func fixture() throws -> QueryFixture {
        let f = try QueryFixture()
        try f.conn.install(polygonContainsFunction)
        try f.createClass("Post", fields: ["hot": FieldInfo(type: .boolean), "title": FieldInfo(type: .string)])
        try f.createClass("Comment", fields: [
            "text": FieldInfo(type: .string), "post": FieldInfo(type: .pointer, targetClass: "Post"),
            "tags": FieldInfo(type: .array), "city": FieldInfo(type: .string),
        ])
        try f.insert("Post", json(#"{"hot":true,"title":"Oslo"}"#), id: "p1")
        try f.insert("Post", json(#"{"hot":false,"title":"Rome"}"#), id: "p2")
        try f.insert("Post", json(#"{"hot":true,"title":"Lima"}"#), id: "p3", readers: ["role:Staff"])
        for (id, post, tags, city) in [("c1", "p1", #"["a","b"]"#, "Oslo"), ("c2", "p2", #"["a"]"#, "Rome"),
                                       ("c3", "p3", #"[]"#, "Lima"), ("c4", nil, #"["z"]"#, "Pune")] as [(String, String?, String, String)] {
            let p = post.map { #","post":{"__type":"Pointer","className":"Post","objectId":"\#($0)"}"# } ?? ""
            try f.insert("Comment", json(#"{"text":"\#(id)","tags":\#(tags),"city":"\#(city)"\#(p)}"#), id: id)
        }
        return f
    }

    func compiler(_ f: QueryFixture, _ identity: Identity = .master) -> QueryCompiler {
        QueryCompiler(schema: f.schemas["Comment"]!, subqueries: SubqueryContext(schemas: f, identity: identity, conn: f.conn))
    }

    @Test func inQueryAppliesTheCallersACLToTheInnerClass() throws {
        let f = try fixture()
        let w = json(#"{"post":{"$inQuery":{"className":"Post","where":{"hot":true}}}}"#)
        #expect(try f.ids("Comment", w, order: "text") == ["c1", "c3"])
        #expect(try f.ids("Comment", w, order: "text", identity: .user("u1")) == ["c1"])
        #expect(try f.ids("Comment", w, order: "text", identity: .user("u1", roles: ["Staff"])) == ["c1", "c3"])
        #expect(try f.ids("Comment", w, order: "text", identity: .anonymous) == ["c1"])
        let not = json(#"{"post":{"$notInQuery":{"className":"Post","where":{"hot":true}}}}"#)
        #expect(try f.ids("Comment", not, order: "text", identity: .user("u1")) == ["c2", "c3", "c4"])
        // values are bound; the class name reaches the SQL only after validation
        let c = try compiler(f, .user("u1", roles: ["Staff"])).compile(w)
        #expect(c.binds.contains(.text("Post")) && c.binds.contains(.text("|role:Staff|")) && c.binds.contains(.text("|u1|")))
        #expect(!c.sql.contains("Staff") && !c.sql.contains("u1"))
        #expect(throws: ParseError.self) {
            try compiler(f).compile(json(#"{"post":{"$inQuery":{"className":"Post\"--","where":{}}}}"#))
        }
    }

    @Test func selectAndDontSelect() throws {
        let f = try fixture()
        let sel = json(#"{"city":{"$select":{"query":{"className":"Post","where":{"hot":true}},"key":"title"}}}"#)
        #expect(try f.ids("Comment", sel, order: "text") == ["c1", "c3"])
        #expect(try f.ids("Comment", sel, order: "text", identity: .user("u9")) == ["c1"])
        let dont = json(#"{"city":{"$dontSelect":{"query":{"className":"Post","where":{"hot":true}},"key":"title"}}}"#)
        #expect(try f.ids("Comment", dont, order: "text") == ["c2", "c4"])
        let bad = json(#"{"city":{"$select":{"query":{"className":"Post","where":{}},"key":"title') OR 1=1 --"}}}"#)
        #expect(throws: ParseError.self) { try compiler(f).compile(bad) }
    }

    @Test func withoutAContextInnerQueriesAre102() throws {
        let f = try fixture()
        do {
            _ = try QueryCompiler(schema: f.schemas["Comment"]!).compile(json(#"{"post":{"$inQuery":{"className":"Post","where":{}}}}"#))
            Issue.record("expected 102")
        } catch {
            #expect(error.code == .invalidQuery)
        }
    }

    @Test func norAndContainedBy() throws {
        let f = try fixture()
        #expect(try f.ids("Comment", json(#"{"$nor":[{"text":"c1"},{"city":"Pune"}]}"#), order: "text") == ["c2", "c3"])
        #expect(try f.ids("Comment", json(#"{"tags":{"$containedBy":["a","b"]}}"#), order: "text") == ["c1", "c2", "c3"])
        #expect(try f.ids("Comment", json(#"{"tags":{"$containedBy":["a"]}}"#), order: "text") == ["c2", "c3"])
        let c = try compiler(f).compile(json(#"{"tags":{"$containedBy":["x' OR 1=1 --"]}}"#))
        #expect(c.binds == [.text("x' OR 1=1 --")])
    }

    @Test func polygonOperators() throws {
        let f = try QueryFixture()
        try f.conn.install(polygonContainsFunction)
        try f.createClass("Zone", fields: ["area": FieldInfo(type: .polygon), "at": FieldInfo(type: .geoPoint)])
        try f.insert("Zone", json(#"{"area":{"__type":"Polygon","coordinates":[[0,0],[0,10],[10,10],[10,0]]},"at":{"__type":"GeoPoint","latitude":5,"longitude":5}}"#), id: "z1")
        try f.insert("Zone", json(#"{"area":{"__type":"Polygon","coordinates":[[20,20],[30,20],[20,30]]},"at":{"__type":"GeoPoint","latitude":29,"longitude":29}}"#), id: "z2")
        #expect(try f.ids("Zone", json(#"{"area":{"$geoIntersects":{"$point":{"__type":"GeoPoint","latitude":1,"longitude":9}}}}"#)) == ["z1"])
        #expect(try f.ids("Zone", json(#"{"area":{"$geoIntersects":{"$point":{"__type":"GeoPoint","latitude":29,"longitude":29}}}}"#)) == [])
        #expect(try f.ids("Zone", json(#"{"at":{"$geoWithin":{"$polygon":[[20,20],[30,20],[30,30],[20,30]]}}}"#)) == ["z2"])
        #expect(try f.ids("Zone", json(#"{"at":{"$geoWithin":{"$polygon":[[20,20],[30,20],[20,30]]}}}"#)) == [])
        // the polygon filter is not handed to the geo planner (its bounding box is not its area)
        let c = try QueryCompiler(schema: f.schemas["Zone"]!).compile(json(#"{"at":{"$geoWithin":{"$polygon":[[0,0],[0,1],[1,1]]}}}"#))
        #expect(c.geo == nil)
    }

    @Test func polygonContainment() {
        let sq: [(Double, Double)] = [(0, 0), (0, 10), (10, 10), (10, 0)]
        #expect(Polygon.contains(sq, lat: 5, lng: 5))
        #expect(Polygon.contains(sq, lat: 0, lng: 5))  // on an edge
        #expect(!Polygon.contains(sq, lat: 11, lng: 5))
        let tri: [(Double, Double)] = [(20, 20), (30, 20), (20, 30)]
        #expect(!Polygon.contains(tri, lat: 29, lng: 29))
        #expect(Polygon.contains(tri, lat: 21, lng: 21))
    }

    @Test func roleAwareACLConditions() {
        let id = Identity.user("u1", roles: ["Staff", "Admins"])
        #expect(ACLs.admits("|role:Staff|", id))
        #expect(!ACLs.admits("|role:Staff|", .user("u1")))
        #expect(!ACLs.admits("|role:Other|u2|", id))
        let c = ACLs.writeCondition(id)!
        #expect(c.binds == [.text("|u1|"), .text("|role:Staff|"), .text("|role:Admins|")])
        #expect(c.sql == "(wperm IS NULL OR instr(wperm, ?) > 0 OR instr(wperm, ?) > 0 OR instr(wperm, ?) > 0)")
    }

    @Test func classPermissionsWithRolesAndPointers() throws {
        let clp = try ClassPermissions.validate(json(#"""
            {"find":{"role:Staff":true,"pointerFields":["owner"]},"get":{},"create":{"pointerFields":["owner"]},
             "update":{},"readUserFields":["editors"],"writeUserFields":["owner"]}
            """#).objectValue!)
        #expect(ClassPermissions.access(clp, .find, .user("u", roles: ["Staff"])) == .allowed)
        #expect(ClassPermissions.access(clp, .find, .user("u")) == .pointerFields(["owner", "editors"]))
        #expect(ClassPermissions.access(clp, .get, .user("u")) == .pointerFields(["editors"]))
        #expect(ClassPermissions.access(clp, .update, .user("u")) == .pointerFields(["owner"]))
        #expect(ClassPermissions.access(clp, .create, .user("u")) == .denied)
        #expect(ClassPermissions.access(clp, .find, .anonymous) == .denied)
        #expect(ClassPermissions.access(clp, .delete, .anonymous) == .allowed)
        #expect(ClassPermissions.access(clp, .find, .master) == .allowed)
        let obj = json(#"{"editors":[{"__type":"Pointer","className":"_User","objectId":"u"}]}"#).objectValue!
        #expect(ClassPermissions.pointerFieldsAdmit(["owner", "editors"], object: obj, userId: "u"))
        #expect(!ClassPermissions.pointerFieldsAdmit(["owner"], object: obj, userId: "u"))
        for bad in [#"{"find":{"role:a|b":true}}"#, #"{"readUserFields":"x"}"#, #"{"find":{"pointerFields":["a b"]}}"#] {
            #expect(throws: ParseError.self) { try ClassPermissions.validate(json(bad).objectValue!) }
        }
    }

    @Test func roleMembershipFollowsCommittedRoleWrites() throws {
        let f = try StorageFixture()
        let store = f.store
        func user(_ id: String) -> JSONValue { ["__type": "Pointer", "className": "_User", "objectId": .string(id)] }
        func role(_ id: String) -> JSONValue { ["__type": "Pointer", "className": "_Role", "objectId": .string(id)] }
        #expect(try store.roles(ofUser: "u1") == [])
        let staff = try store.insert("_Role", fields: ["name": "Staff", "users": ["__op": "AddRelation", "objects": [user("u1")]]],
                                     acl: ["*": ["read": true]], identity: .master)
        #expect(try store.roles(ofUser: "u1") == ["Staff"])
        let gen = store.context.roles.generation
        // a role whose `roles` relation lists Staff: Staff's users get its rights too
        let all = try store.insert("_Role", fields: ["name": "Everyone", "roles": ["__op": "AddRelation", "objects": [role(staff.objectId)]]],
                                   acl: ["*": ["read": true]], identity: .master)
        #expect(store.context.roles.generation > gen)
        #expect(try store.roles(ofUser: "u1") == ["Everyone", "Staff"])
        #expect(try store.identity(forUser: "u1").roles == ["Everyone", "Staff"])
        // a rolled-back write leaves the cache as it was
        do {
            try store.transaction { () throws(ParseError) in
                _ = try store.update("_Role", objectId: staff.objectId,
                                     changes: ["users": ["__op": "RemoveRelation", "objects": [user("u1")]]], identity: .master)
                throw ParseError(.scriptFailed, "abort")
            }
        } catch {}
        #expect(try store.roles(ofUser: "u1") == ["Everyone", "Staff"])
        _ = try store.update("_Role", objectId: staff.objectId, changes: ["users": ["__op": "RemoveRelation", "objects": [user("u1")]]],
                             identity: .master)
        #expect(try store.roles(ofUser: "u1") == [])
        _ = try store.update("_Role", objectId: all.objectId, changes: ["users": ["__op": "AddRelation", "objects": [user("u1")]]],
                             identity: .master)
        #expect(try store.roles(ofUser: "u1") == ["Everyone"])
        try store.delete("_Role", objectId: all.objectId, identity: .master)
        #expect(try store.roles(ofUser: "u1") == [])
    }

    @Test func canSeeCombinesClassPermissionsRolesAndACL() throws {
        let f = try StorageFixture()
        let store = f.store
        let u = "u1"
        let mine = try store.insert("Doc", fields: ["owner": ["__type": "Pointer", "className": "_User", "objectId": .string(u)]],
                                    acl: ["role:Staff": ["read": true]], identity: .master)
        let other = try store.insert("Doc", fields: ["x": 1], acl: ["role:Staff": ["read": true]], identity: .master)
        #expect(try store.canSee(mine, identity: .user(u, roles: ["Staff"])))
        #expect(try !store.canSee(mine, identity: .user(u)))
        try store.setClassPermissions("Doc", ["find": ["pointerFields": ["owner"]]])
        #expect(try store.canSee(mine, identity: .user(u, roles: ["Staff"])))
        #expect(try !store.canSee(other, identity: .user(u, roles: ["Staff"])))
        #expect(try !store.canSee(mine, identity: .anonymous))
        #expect(try store.canSee(other, identity: .master))
        // role names are unique in SQLite as well
        _ = try store.insert("_Role", fields: ["name": "Staff"], acl: [:], identity: .master)
        #expect(throws: ParseError.self) { _ = try store.insert("_Role", fields: ["name": "Staff"], acl: [:], identity: .master) }
    }
}
