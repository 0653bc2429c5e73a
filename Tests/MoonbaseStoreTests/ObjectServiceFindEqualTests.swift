import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore
import Testing

/// `ObjectService.findEqual` answers `field = scalar` finds from statements cached by the query's
/// shape (Lua's `db.first`/`db.find` in a loop). What it answers must be what the general find
/// answers for the same caller, byte for byte, on the first query of a shape and on the cached
/// ones; the queries it does not handle must be left to the general path (nil), and schema and
/// permission changes must not leave a stale answer behind.
@Suite(.timeLimit(.minutes(1)))
struct ObjectServiceFindEqualTests {
    let f: StorageFixture
    let objects: ObjectService
    init() throws {
        f = try StorageFixture()
        objects = ObjectService(store: f.store)
    }

    func text(_ b: [UInt8]?) -> String { b.map { String(decoding: $0, as: UTF8.self) } ?? "nil" }

    /// The general path's answer.
    func general(_ cls: String, _ w: JSONObject, limit: Int, _ identity: Identity) throws -> [UInt8] {
        let q = FindQuery(className: cls, where: w.isEmpty ? nil : .object(w), limit: limit)
        return try objects.find(q, caller: CallerContext(identity: identity)).results
    }

    func fast(_ cls: String, _ w: JSONObject, limit: Int, _ identity: Identity) throws -> [UInt8]? {
        try objects.findEqual(cls, w, limit: limit, caller: CallerContext(identity: identity))?.results
    }

    @Test func answersWhatTheGeneralFindAnswersForEveryCaller() throws {
        let store = f.store
        let made: [(JSONObject, JSONValue?)] = [
            (["name": "a", "n": 3, "f": 1.5, "ok": true, "tags": ["x", "y"], "meta": ["k": 1]], nil),
            (["name": "a", "n": 4, "f": 2.5, "ok": false, "text": "é \"q\" \\ \n"], nil),
            (["name": "b", "n": 3, "ok": true], ["u1": ["read": true, "write": true]]),
            (["name": "a", "n": 3], ["role:mods": ["read": true]]),
            (["name": "a", "n": 5], ["*": ["read": true]]),
            (["name": "a", "n": 3], [:]),
            ([:], nil),
        ]
        var ids: [String] = []
        for (fields, acl) in made { ids.append(try store.insert("Thing", fields: fields, acl: acl, identity: .master).objectId) }
        let shapes: [JSONObject] = [
            ["name": "a"], ["n": 3], ["f": 1.5], ["ok": true], ["ok": false], ["name": "a", "n": 3],
            ["objectId": .string(ids[2])], ["objectId": "nope"], ["missing": 1], ["meta.k": 1], [:],
            ["name": "zzz"], ["n": 3.0],
        ]
        let callers: [Identity] = [.master, .anonymous, .user("u1"), .user("u2", roles: ["mods"])]
        for w in shapes {
            for who in callers {
                for limit in [1, 2, 100] {
                    let want = try general("Thing", w, limit: limit, who)
                    for round in 1...2 {   // the first query of a shape compiles it, the second uses the cache
                        let got = try #require(try fast("Thing", w, limit: limit, who), "\(w) not taken by the cache")
                        #expect(got == want, "\(w) as \(who), limit \(limit), round \(round): \(text(got)) vs \(text(want))")
                    }
                }
            }
        }
    }

    @Test func leavesOtherQueriesToTheGeneralPath() throws {
        let store = f.store
        _ = try store.insert("Thing", fields: ["name": "a", "tags": ["x"], "when": ["__type": "Date", "iso": "2024-01-02T03:04:05.000Z"],
                                               "who": ["__type": "Pointer", "className": "Thing", "objectId": "x"]],
                             acl: nil, identity: .master)
        let others: [JSONObject] = [
            ["n": ["$gt": 1]], ["name": .null], ["tags": "x"], ["when": "2024-01-02T03:04:05.000Z"],
            ["createdAt": "2024-01-02T03:04:05.000Z"], ["who": "x"], ["name": ["a"]], ["$or": [["name": "a"]]],
            ["ACL": "x"], ["bad name": 1],
        ]
        for w in others {
            #expect(try fast("Thing", w, limit: 1, .master) == nil, "\(w) was taken by the cache")
        }
        #expect(try fast("NoSuchClass", ["a": 1], limit: 1, .master) == nil)
        #expect(try fast("Thing", ["name": "a"], limit: 0, .master) == nil)
    }

    @Test func permissionChangesTakeEffectAtOnce() throws {
        let store = f.store
        _ = try store.insert("Doc", fields: ["owner": ["__type": "Pointer", "className": "_User", "objectId": "u1"], "n": 1],
                             acl: nil, identity: .master)
        #expect(try fast("Doc", ["n": 1], limit: 1, .user("u2")) != nil)
        // Limited to the caller's own objects: the general path applies the pointer permission.
        try store.setClassPermissions("Doc", ["find": ["pointerFields": ["owner"]]])
        #expect(try fast("Doc", ["n": 1], limit: 1, .user("u2")) == nil)
        #expect(try general("Doc", ["n": 1], limit: 1, .user("u2")) == Array("[]".utf8))
        #expect(try general("Doc", ["n": 1], limit: 1, .user("u1")) != Array("[]".utf8))
        // Refused outright: the general path answers 119.
        try store.setClassPermissions("Doc", ["find": [:]])
        #expect(try fast("Doc", ["n": 1], limit: 1, .anonymous) == nil)
        #expect(throws: ParseError.self) { try general("Doc", ["n": 1], limit: 1, .anonymous) }
        #expect(try fast("Doc", ["n": 1], limit: 1, .master) != nil)
    }

    @Test func aFieldThatGetsATypeChangesTheCachedShape() throws {
        let store = f.store
        _ = try store.insert("Late", fields: ["a": 1], acl: nil, identity: .master)
        // `b` is unknown: the query compiles (and matches nothing).
        #expect(try fast("Late", ["b": 1], limit: 1, .master) == Array("[]".utf8))
        // Now `b` is a String: a Number no longer compares with it (111 from the general path).
        let s = try store.insert("Late", fields: ["b": "x"], acl: nil, identity: .master)
        #expect(try fast("Late", ["b": 1], limit: 1, .master) == nil)
        #expect(throws: ParseError.self) { try general("Late", ["b": 1], limit: 1, .master) }
        let got = try #require(try fast("Late", ["b": "x"], limit: 1, .master))
        #expect(text(got).contains(s.objectId))
    }

    @Test func readsInsideATransactionSeeItsWrites() throws {
        let store = f.store
        _ = try store.insert("Tx", fields: ["k": 0], acl: nil, identity: .master)
        let seen = try store.transaction { () throws(ParseError) -> [UInt8]? in
            _ = try store.insert("Tx", fields: ["k": 7], acl: nil, identity: .master)
            return try objects.findEqual("Tx", ["k": 7], limit: 1, caller: CallerContext(identity: .anonymous))?.results
        }
        let got = try #require(seen)
        #expect(text(got).contains("\"k\":7"))
    }
}
