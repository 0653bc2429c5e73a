import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore
import Testing

/// `ObjectService.get` reads a plain object by id without compiling a query; what it answers must
/// be what the query path answers for the same caller, byte for byte, and the cases that need
/// the query path (keys, include, pointer permissions) must still get it.
@Suite(.timeLimit(.minutes(1)))
struct ObjectServiceGetTests {
    let f: StorageFixture
    let objects: ObjectService
    init() throws {
        f = try StorageFixture()
        objects = ObjectService(store: f.store)
    }

    /// The query path's answer: a find on the objectId, as `get` answered before its shortcut.
    func viaQuery(_ cls: String, _ id: String, _ identity: Identity) throws -> [UInt8]? {
        var q = FindQuery(className: cls, where: ["objectId": .string(id)], limit: 1)
        q.operation = .get
        let r = try f.store.find(q, identity: identity, afterFind: nil, afterFindApplies: nil)
        return r.resultCount == 1 ? Array(r.results.dropFirst().dropLast()) : nil
    }

    func viaGet(_ cls: String, _ id: String, _ identity: Identity, keys: [String]? = nil) throws -> [UInt8]? {
        do {
            return try objects.get(cls, id, keys: keys, caller: CallerContext(identity: identity))
        } catch where error.code == .objectNotFound {
            return nil
        }
    }

    @Test func answersWhatTheQueryAnswersForEveryCaller() throws {
        let store = f.store
        let user = try store.insert("Thing", fields: ["name": "u"], acl: nil, identity: .master)
        let made: [(JSONObject, JSONValue?)] = [
            (["title": "plain", "n": 3, "f": 1.5, "ok": true, "none": .null, "tags": ["a", ["b": 1]]], nil),
            (["when": ["__type": "Date", "iso": "2024-01-02T03:04:05.000Z"],
              "loc": ["__type": "GeoPoint", "latitude": 40, "longitude": -74],
              "who": ["__type": "Pointer", "className": "Thing", "objectId": .string(user.objectId)],
              "file": ["__type": "File", "name": "a.png", "url": "http://x/a.png"], "text": "é \"q\" \\ \n"], nil),
            (["secret": 1], ["u1": ["read": true, "write": true]]),
            (["roleOnly": 1], ["role:mods": ["read": true]]),
            (["publicRead": 1], ["*": ["read": true]]),
            (["nobody": 1], [:]),
            ([:], nil),
        ]
        var ids: [String] = []
        for (fields, acl) in made { ids.append(try store.insert("Thing", fields: fields, acl: acl, identity: .master).objectId) }
        ids.append("doesNotExist")
        let callers: [Identity] = [.master, .anonymous, .user("u1"), .user("u2", roles: ["mods"])]
        for id in ids {
            for who in callers {
                let got = try viaGet("Thing", id, who)
                let want = try viaQuery("Thing", id, who)
                #expect(got == want, "\(id) as \(who): \(got.map { String(decoding: $0, as: UTF8.self) } ?? "nil") vs \(want.map { String(decoding: $0, as: UTF8.self) } ?? "nil")")
            }
        }
        // Keys still select fields; a missing class is 101 as before.
        let some = try #require(try viaGet("Thing", ids[0], .master, keys: ["title"]))
        let o = try JSON.parse(some).objectValue ?? [:]
        #expect(o["title"] == "plain" && o["n"] == nil)
        #expect(try viaGet("NoSuchClass", "x", .master) == nil)
    }

    @Test func pointerPermissionsStillLimitWhoGetsAnObject() throws {
        let store = f.store
        let mine = try store.insert("Doc", fields: ["owner": ["__type": "Pointer", "className": "_User", "objectId": "u1"]],
                                    acl: nil, identity: .master)
        try store.setClassPermissions("Doc", ["get": ["pointerFields": ["owner"]], "find": ["*": true]])
        #expect(try viaGet("Doc", mine.objectId, .user("u1")) != nil)
        #expect(try viaGet("Doc", mine.objectId, .user("u2")) == nil)
        #expect(try viaGet("Doc", mine.objectId, .master) != nil)
    }
}
