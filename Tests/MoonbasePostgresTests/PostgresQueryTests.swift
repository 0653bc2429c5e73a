import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
@testable import MoonbaseStore
import Testing

extension PostgresSuite {
    /// The PostgreSQL dialect of the query compiler against the SQLite one: the same objects are
    /// stored in both (SQLite through its store, PostgreSQL with plain SQL in PostgresLayout's
    /// form) and every where-case must select the same objects, in the same order when ordered,
    /// for master, anonymous and user callers; bad queries fail with the same code.
    @Suite struct PostgresQueryTests {
        /// A SQLite store with the objects, and a PostgreSQL store holding copies of them.
        final class Pair {
            let sqlite: SQLiteDocumentStore
            let pg: PostgresStore
            let dir: String
            var ids: [String: String] = [:]  // name → objectId

            init() throws {
                dir = NSTemporaryDirectory() + "mb-pgq-" + UUID().uuidString.prefix(8)
                try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
                sqlite = try SQLiteDocumentStore(path: dir + "/data.db")
                let name = uniqueTable("mbq")
                let admin = try PGConnection(url: PGTestCluster.url)
                defer { admin.close() }
                try admin.executeScript("CREATE DATABASE \(name)")
                let base = PGTestCluster.url
                pg = try PostgresStore(url: String(base[..<base.lastIndex(of: "/")!]) + "/" + name)
            }

            deinit {
                pg.pool.close()
                sqlite.close()
                try? FileManager.default.removeItem(atPath: dir)
            }

            func add(_ name: String, _ fieldsJSON: String, acl: String? = nil, className: String = "Post") throws {
                var text = fieldsJSON
                for (n, id) in ids { text = text.replacingOccurrences(of: "@\(n)@", with: id) }
                let fields = try JSON.parse(text).objectValue ?? [:]
                let o = try sqlite.insert(className, fields: fields, acl: try acl.map { try JSON.parse($0) }, identity: .master)
                ids[name] = o.objectId
                // Distinct creation times, so time orders have no ties to break differently.
                Thread.sleep(forTimeInterval: 0.003)
            }

            /// Copies the class (schema row, table, rows) from SQLite into PostgreSQL.
            func copy(_ className: String = "Post") throws {
                let schema = try #require(sqlite.schema(className))
                let rows = try sqlite.find(FindQuery(className: className, limit: 1000), identity: .master, afterFind: nil,
                                           afterFindApplies: nil).objects()
                try PostgresLayout.ensureClassTable(className, pool: pg.pool)
                try pg.pool.withConnection { (c) throws(ParseError) in
                    _ = try c.execute("INSERT INTO _mb_schema(className, fields, indexes) VALUES ($1, $2, $3)",
                                      [.text(className), .text(JSON.encodeString(.object(schema.fieldsJSON))),
                                       .text(JSON.encodeString(.object(schema.indexes)))])
                    for o in rows {
                        var data = o
                        for k in ["objectId", "createdAt", "updatedAt", "ACL"] { _ = data.removeValue(forKey: k) }
                        let acl = o["ACL"]?.objectValue
                        let perms = ACLs.permColumns(acl)
                        func arr(_ p: String?) -> PGValue {
                            guard let p else { return .null }
                            let items = p.split(separator: "|").map { "\"\($0)\"" }.joined(separator: ",")
                            return .text("{\(items)}")
                        }
                        _ = try c.execute(
                            "INSERT INTO \(Naming.table(className))(objectId, createdAt, updatedAt, acl, rperm, wperm, data) VALUES ($1,$2,$3,$4,$5::text[],$6::text[],$7)",
                            [.text(o["objectId"]?.stringValue ?? ""),
                             .integer(ISO8601.parse(o["createdAt"]?.stringValue ?? "") ?? 0),
                             .integer(ISO8601.parse(o["updatedAt"]?.stringValue ?? "") ?? 0),
                             acl.map { .json(Array(JSON.encodeString(.object($0)).utf8)) } ?? .null,
                             arr(perms.rperm), arr(perms.wperm), .json(Array(JSON.encodeString(.object(data)).utf8))])
                    }
                }
            }
        }

        static func fixture() throws -> Pair {
            let p = try Pair()
            try p.add("a", #"{"title":"alpha","likes":3,"tags":["x","y"],"flag":true,"due":{"__type":"Date","iso":"2024-01-02T00:00:00.000Z"},"author":{"__type":"Pointer","className":"_User","objectId":"u1"},"meta":{"n":1,"s":"k"},"price":1.5}"#)
            try p.add("b", #"{"title":"beta","likes":10,"tags":["y"],"flag":false,"due":{"__type":"Date","iso":"2024-03-01T12:00:00.000Z"},"author":{"__type":"Pointer","className":"_User","objectId":"u2"},"meta":{"n":2},"price":2}"#)
            try p.add("c", #"{"title":"Gamma","likes":0,"tags":[],"meta":{"n":3,"s":"q"},"price":-1}"#)
            try p.add("d", #"{"title":"delta","tags":["z",{"__type":"Pointer","className":"_User","objectId":"u1"}],"note":null}"#)
            try p.add("e", #"{"likes":7,"flag":true,"title":"épsilon","ptrs":[{"__type":"Pointer","className":"_User","objectId":"u1"}],"price":100}"#,
                      acl: #"{"u1":{"read":true,"write":true}}"#)
            try p.add("f", #"{"likes":5,"title":"zeta","tags":["x"],"price":3}"#, acl: #"{"role:mods":{"read":true}}"#)
            try p.add("g", #"{"title":"eta","likes":10,"price":7}"#, acl: #"{"*":{"read":true}}"#)
            try p.add("h", #"{"title":"theta","likes":2,"price":4}"#, acl: #"{}"#)
            try p.copy()
            return p
        }

        static let identities: [Identity] = [.master, .anonymous, .user("u1"), .user("u2", roles: ["mods"])]

        static let whereCases: [String] = [
            #"{}"#,
            #"{"title":"alpha"}"#, #"{"likes":10}"#, #"{"likes":10.0}"#, #"{"flag":true}"#, #"{"flag":false}"#,
            #"{"likes":{"$gt":3}}"#, #"{"likes":{"$gte":3,"$lt":10}}"#, #"{"likes":{"$lte":0}}"#, #"{"price":{"$gt":1.5}}"#,
            #"{"title":{"$gt":"delta"}}"#, #"{"title":{"$lt":"beta"}}"#, #"{"title":{"$ne":"alpha"}}"#, #"{"likes":{"$ne":10}}"#,
            #"{"likes":{"$in":[3,7,99]}}"#, #"{"likes":{"$nin":[3,7]}}"#, #"{"title":{"$in":["beta","zeta"]}}"#, #"{"likes":{"$in":[]}}"#,
            #"{"likes":{"$exists":true}}"#, #"{"likes":{"$exists":false}}"#, #"{"note":{"$exists":true}}"#, #"{"note":null}"#,
            #"{"likes":null}"#, #"{"likes":{"$ne":null}}"#, #"{"meta.n":2}"#, #"{"meta.n":{"$gte":2}}"#, #"{"meta.s":"k"}"#,
            #"{"meta":{"n":1,"s":"k"}}"#, #"{"meta.s":{"$exists":false}}"#,
            #"{"tags":"y"}"#, #"{"tags":["x","y"]}"#, #"{"tags":{"$all":["x","y"]}}"#, #"{"tags":{"$in":["z","x"]}}"#,
            #"{"tags":{"$nin":["y"]}}"#, #"{"tags":{"$size":1}}"#, #"{"tags":{"$containedBy":["x","y"]}}"#, #"{"tags":{"$all":[]}}"#,
            #"{"tags":{"__type":"Pointer","className":"_User","objectId":"u1"}}"#, #"{"tags":{"$gt":"x"}}"#,
            #"{"author":{"__type":"Pointer","className":"_User","objectId":"u1"}}"#,
            #"{"author":{"$in":[{"__type":"Pointer","className":"_User","objectId":"u1"},{"__type":"Pointer","className":"_User","objectId":"u2"}]}}"#,
            #"{"author":{"$ne":{"__type":"Pointer","className":"_User","objectId":"u1"}}}"#,
            #"{"ptrs":{"__type":"Pointer","className":"_User","objectId":"u1"}}"#,
            #"{"due":{"$gt":{"__type":"Date","iso":"2024-02-01T00:00:00.000Z"}}}"#, #"{"due":{"$lte":"2024-01-02T00:00:00.000Z"}}"#,
            #"{"createdAt":{"$gte":{"__type":"Date","iso":"2000-01-01T00:00:00.000Z"}}}"#, #"{"updatedAt":{"$lt":{"__type":"Date","iso":"2000-01-01T00:00:00.000Z"}}}"#,
            #"{"objectId":{"$in":["nope"]}}"#,
            #"{"$or":[{"likes":3},{"title":"beta"}]}"#, #"{"$and":[{"likes":{"$gt":1}},{"likes":{"$lt":8}}]}"#,
            #"{"$nor":[{"likes":3},{"flag":true}]}"#, #"{"$or":[{"likes":{"$exists":false}},{"$and":[{"flag":true},{"price":{"$gte":100}}]}]}"#,
            #"{"title":{"$regex":"^[a-d]"}}"#, #"{"title":{"$regex":"A","$options":"i"}}"#, #"{"title":{"$regex":"\\Qeta\\E$"}}"#,
            #"{"tags":{"$regex":"^x"}}"#, #"{"title":{"$regex":"^(al|be)"}}"#,
        ]

        /// JSON text with object keys sorted at every level: jsonb keeps keys in its own order,
        /// which JSON does not give a meaning to.
        static func canon(_ v: JSONValue) -> String {
            switch v {
            case .object(let o):
                return "{" + o.entries.sorted { $0.key < $1.key }.map { JSON.encodeString(.string($0.key)) + ":" + canon($0.value) }
                    .joined(separator: ",") + "}"
            case .array(let a): return "[" + a.map(canon).joined(separator: ",") + "]"
            default: return JSON.encodeString(v)
            }
        }

        /// Object names of the results, so a failure says which objects differ.
        static func names(_ r: FindResult, _ p: Pair) throws -> [String] {
            let byId = Dictionary(uniqueKeysWithValues: p.ids.map { ($1, $0) })
            return try r.objects().map { byId[$0["objectId"]?.stringValue ?? ""] ?? "?" }
        }

        static func find(_ store: SQLiteDocumentStore, _ q: FindQuery, _ id: Identity) -> Result<FindResult, ParseError> {
            do { return .success(try store.find(q, identity: id, afterFind: nil, afterFindApplies: nil)) } catch { return .failure(error) }
        }

        static func find(_ store: PostgresStore, _ q: FindQuery, _ id: Identity) -> Result<FindResult, ParseError> {
            do { return .success(try store.find(q, identity: id, afterFind: nil, afterFindApplies: nil)) } catch { return .failure(error) }
        }

        @Test func everyWhereCaseSelectsTheSameObjectsAsSQLite() throws {
            let p = try Self.fixture()
            var compared = 0
            for w in Self.whereCases {
                for id in Self.identities {
                    let q = FindQuery(className: "Post", where: try JSON.parse(w), count: true)
                    let s = Self.find(p.sqlite, q, id), g = Self.find(p.pg, q, id)
                    switch (s, g) {
                    case (.success(let a), .success(let b)):
                        #expect(try Self.names(a, p).sorted() == Self.names(b, p).sorted(), "\(w) as \(id)")
                        #expect(a.count == b.count, "count of \(w) as \(id)")
                        compared += 1
                    case (.failure(let a), .failure(let b)):
                        #expect(a.code == b.code, "\(w): \(a) vs \(b)")
                    default:
                        Issue.record("\(w) as \(id): SQLite \(s) vs PostgreSQL \(g)")
                    }
                }
            }
            #expect(compared > 200)
            // A few answers checked by hand, so both backends agreeing on a wrong answer fails too.
            func pgNames(_ w: String, _ id: Identity = .master) throws -> [String] {
                try Self.names(try p.pg.find(FindQuery(className: "Post", where: try JSON.parse(w)), identity: id, afterFind: nil, afterFindApplies: nil), p).sorted()
            }
            #expect(try pgNames(#"{"likes":{"$gt":3}}"#) == ["b", "e", "f", "g"])
            #expect(try pgNames(#"{"tags":"y"}"#) == ["a", "b"])
            #expect(try pgNames(#"{"likes":{"$exists":false}}"#) == ["d"])
            #expect(try pgNames(#"{"note":null}"#) == ["c", "d", "e", "f", "g", "h", "a", "b"].sorted())
            #expect(try pgNames(#"{}"#, .anonymous) == ["a", "b", "c", "d", "g"])
            #expect(try pgNames(#"{}"#, .user("u2", roles: ["mods"])) == ["a", "b", "c", "d", "f", "g"])
            #expect(try pgNames(#"{"title":{"$regex":"A","$options":"i"}}"#) == ["a", "b", "c", "d", "f", "g", "h"])
        }

        @Test func badQueriesFailWithTheSameCodes() throws {
            let p = try Self.fixture()
            let bad = [
                #"{"likes":"ten"}"#, #"{"title":{"$gt":true}}"#, #"{"$foo":1}"#, #"{"likes":{"$foo":1}}"#, #"{"bad-name":1}"#,
                #"{"ACL":1}"#, #"{"$or":[]}"#, #"{"likes":{"$in":3}}"#, #"{"due":"yesterday"}"#, #"{"flag":1}"#,
                #"{"title":{"$regex":"("}}"#, #"{"title":{"$options":"i"}}"#, #"{"likes":{"$exists":1}}"#,
                #"{"author":"u1"}"#, #"{"tags":{"$gt":true}}"#,
            ]
            for w in bad {
                let q = FindQuery(className: "Post", where: try JSON.parse(w))
                switch (Self.find(p.sqlite, q, .master), Self.find(p.pg, q, .master)) {
                case (.failure(let a), .failure(let b)): #expect(a.code == b.code, "\(w): \(a) vs \(b)")
                case (let s, let g): Issue.record("\(w): SQLite \(s) vs PostgreSQL \(g)")
                }
            }
        }

        @Test func orderLimitSkipKeysAndCountMatchSQLite() throws {
            let p = try Self.fixture()
            let cases: [(String, [String], Int, Int)] = [
                (#"{}"#, ["title"], 100, 0), (#"{}"#, ["-title"], 3, 2), (#"{}"#, ["price"], 100, 0), (#"{}"#, ["-price"], 4, 1),
                (#"{}"#, ["-createdAt"], 5, 0), (#"{}"#, ["createdAt"], 100, 3), (#"{}"#, ["objectId"], 100, 0),
                (#"{"likes":{"$exists":true}}"#, ["-likes", "title"], 100, 0), (#"{}"#, ["due", "title"], 100, 0),
                (#"{}"#, ["-due", "-title"], 100, 0), (#"{}"#, ["author", "title"], 100, 0), (#"{}"#, ["title"], 0, 0),
            ]
            for (w, order, limit, skip) in cases {
                for id in Self.identities {
                    var q = FindQuery(className: "Post", where: try JSON.parse(w), limit: limit, skip: skip, count: true)
                    q.order = order.map { SortKey(field: $0.hasPrefix("-") ? String($0.dropFirst()) : $0, descending: $0.hasPrefix("-")) }
                    let a = try p.sqlite.find(q, identity: id, afterFind: nil, afterFindApplies: nil)
                    let b = try p.pg.find(q, identity: id, afterFind: nil, afterFindApplies: nil)
                    #expect(try Self.names(a, p) == Self.names(b, p), "\(w) order \(order) limit \(limit) skip \(skip) as \(id)")
                    #expect(a.count == b.count)
                }
            }
            // keys / excludeKeys project the same way, and results carry the same fields.
            var q = FindQuery(className: "Post", where: try JSON.parse(#"{"title":"alpha"}"#), keys: ["likes", "meta.n"])
            q.excludeKeys = ["likes"]
            let a = try p.sqlite.find(q, identity: .master, afterFind: nil, afterFindApplies: nil).objects()
            let b = try p.pg.find(q, identity: .master, afterFind: nil, afterFindApplies: nil).objects()
            #expect(a.count == 1 && b.count == 1)
            #expect(Self.canon(.object(a[0])) == Self.canon(.object(b[0])))
            let full = try p.pg.find(FindQuery(className: "Post", where: try JSON.parse(#"{"title":"alpha"}"#)), identity: .master,
                                     afterFind: nil, afterFindApplies: nil).objects()
            let sfull = try p.sqlite.find(FindQuery(className: "Post", where: try JSON.parse(#"{"title":"alpha"}"#)), identity: .master,
                                          afterFind: nil, afterFindApplies: nil).objects()
            #expect(Set(full[0].entries.map(\.key)) == Set(sfull[0].entries.map(\.key)))
            for k in ["likes", "tags", "due", "author", "meta", "createdAt", "ACL"] { #expect(full[0][k].map(Self.canon) == sfull[0][k].map(Self.canon), "\(k)") }
        }

        @Test func includeExpandsTheSamePointersAsSQLite() throws {
            let p = try Pair()
            try p.add("boss", #"{"name":"Boss"}"#, className: "Person")
            try p.add("p1", #"{"name":"Ann","boss":{"__type":"Pointer","className":"Person","objectId":"@boss@"}}"#, className: "Person")
            try p.add("p2", #"{"name":"Bob"}"#, acl: #"{"u1":{"read":true}}"#, className: "Person")
            let person = { (n: String) in #"{"__type":"Pointer","className":"Person","objectId":"@\#(n)@"}"# }
            try p.add("i1", #"{"title":"one","owner":\#(person("p1"))}"#)
            try p.add("i2", #"{"title":"two","owner":\#(person("p2"))}"#)
            try p.add("i3", #"{"title":"three","owners":[\#(person("p1")),\#(person("p2")),"text"],"owner":{"__type":"Pointer","className":"Person","objectId":"gone"}}"#)
            try p.copy("Person")
            try p.copy("Post")
            let hook: AfterFindHook = { (cls: String, objs: [JSONObject]) throws(ParseError) -> [JSONObject] in
                objs.map { var o = $0; o["via"] = .string(cls); return o }
            }
            for include in [["owner"], ["owners"], ["owner.boss"], ["owner", "owners"]] {
                for id in Self.identities {
                    for keys in [nil, ["title"], ["owner.name"]] as [[String]?] {
                        var q = FindQuery(className: "Post", order: [SortKey(field: "title", descending: false)], keys: keys, include: include)
                        q.excludeKeys = keys == nil ? ["title"] : []
                        let a = try p.sqlite.find(q, identity: id, afterFind: hook, afterFindApplies: { $0 == "Person" }).objects()
                        let b = try p.pg.find(q, identity: id, afterFind: hook, afterFindApplies: { $0 == "Person" }).objects()
                        #expect(a.map { Self.canon(.object($0)) } == b.map { Self.canon(.object($0)) }, "include \(include) keys \(keys ?? []) as \(id)")
                    }
                }
            }
            // By hand: Bob is hidden from anonymous callers and stays a Pointer; Ann's boss expands.
            let r = try p.pg.find(FindQuery(className: "Post", order: [SortKey(field: "title", descending: false)], include: ["owner.boss"]),
                                  identity: .anonymous, afterFind: nil, afterFindApplies: nil).objects()
            #expect(r.map { $0["owner"]?["__type"]?.stringValue } == ["Object", "Pointer", "Pointer"])
            #expect(r[0]["owner"]?["boss"]?["name"]?.stringValue == "Boss")
        }

        @Test func textSearchSelectsTheSameObjectsAsSQLite() throws {
            let p = try Pair()
            try p.sqlite.setIndexes("Post", ["words": ["title": "text", "body": "text"]])
            try p.add("a", #"{"title":"Alpha release notes","body":"first steps"}"#)
            try p.add("b", #"{"title":"beta","body":"Second STEP, alphabet soup"}"#)
            try p.add("c", #"{"title":"gamma-ray burst","body":null}"#)
            try p.add("d", #"{"title":"Other","body":"nothing here"}"#, acl: #"{"u1":{"read":true}}"#)
            try p.copy()
            // The tsvector expression is index-legal (IMMUTABLE): the document side builds text
            // indexes on exactly this expression.
            try p.pg.pool.withConnection { (c) throws(ParseError) in
                try c.executeScript("CREATE INDEX post_words ON \"Post\" USING gin (\(QueryCompiler.pgTextVector(["title", "body"])))")
            }
            let terms = [
                (#"{"$term":"alp"}"#, ["a", "b"]), (#"{"$term":"step"}"#, ["a", "b"]), (#"{"$term":"ray"}"#, ["c"]),
                (#"{"$term":"gamma burst"}"#, ["c"]), (#"{"$term":"ALPHA"}"#, ["a", "b"]), (#"{"$term":"zzz"}"#, []),
                (#"{"$term":"Alpha","$caseSensitive":true}"#, ["a"]), (#"{"$term":"alpha","$caseSensitive":true}"#, []), (#"{"$term":"here"}"#, ["d"]),
            ]
            for (search, expected) in terms {
                let w = #"{"title":{"$text":{"$search":\#(search)}}}"#
                for id in Self.identities {
                    var q = FindQuery(className: "Post", where: try JSON.parse(w), count: true)
                    q.order = [SortKey(field: "$score", descending: false)]
                    let a = try p.sqlite.find(q, identity: id, afterFind: nil, afterFindApplies: nil)
                    let b = try p.pg.find(q, identity: id, afterFind: nil, afterFindApplies: nil)
                    #expect(try Self.names(a, p).sorted() == Self.names(b, p).sorted(), "\(w) as \(id)")
                    #expect(a.count == b.count)
                }
                let all = try p.pg.find(FindQuery(className: "Post", where: try JSON.parse(w)), identity: .master, afterFind: nil, afterFindApplies: nil)
                #expect(try Self.names(all, p).sorted() == expected, "\(w)")
            }
            for bad in [#"{"likes":{"$text":{"$search":{"$term":"a"}}}}"#, #"{"title":{"$text":{"$search":{"$term":" -- "}}}}"#,
                        #"{"title":{"$text":{"$search":{"$term":"a","$x":1}}}}"#] {
                let q = FindQuery(className: "Post", where: try JSON.parse(bad))
                switch (Self.find(p.sqlite, q, .master), Self.find(p.pg, q, .master)) {
                case (.failure(let a), .failure(let b)): #expect(a.code == b.code, "\(bad)")
                case (let s, let g): Issue.record("\(bad): SQLite \(s) vs PostgreSQL \(g)")
                }
            }
        }

        @Test func geoQueriesSelectTheSameObjectsAsSQLite() throws {
            let p = try Pair()
            let points: [(String, Double, Double, String)] = [
                ("p0", 40.0, -74.0, "a"), ("p1", 40.05, -74.05, "b"), ("p2", 40.5, -73.5, "a"), ("p3", 41.0, -74.0, "a"),
                ("p4", 0.0, 179.9, "b"), ("p5", 0.1, -179.9, "a"), ("p6", -33.9, 151.2, "b"), ("p7", 89.9, 10, "a"),
            ]
            for (n, lat, lng, cat) in points {
                try p.add(n, #"{"name":"\#(n)","cat":"\#(cat)","loc":{"__type":"GeoPoint","latitude":\#(lat),"longitude":\#(lng)}}"#, className: "Place")
            }
            try p.add("p8", #"{"name":"p8","cat":"a"}"#, className: "Place")
            try p.copy("Place")
            func gp(_ lat: Double, _ lng: Double) -> String { #"{"__type":"GeoPoint","latitude":\#(lat),"longitude":\#(lng)}"# }
            // (where, expected names in order for nearest-first queries, else sorted)
            let cases: [(String, [String], Bool)] = [
                (#"{"loc":{"$within":{"$box":[\#(gp(39.9, -74.1)),\#(gp(40.1, -73.9))]}}}"#, ["p0", "p1"], false),
                (#"{"loc":{"$geoWithin":{"$box":[\#(gp(39.9, -74.1)),\#(gp(40.6, -73.4))]}},"cat":"a"}"#, ["p0", "p2"], false),
                (#"{"loc":{"$within":{"$box":[\#(gp(-1, 179)),\#(gp(1, -179))]}}}"#, ["p4", "p5"], false),
                (#"{"loc":{"$geoWithin":{"$centerSphere":[[-74.0,40.0],0.0125]}}}"#, ["p0", "p1", "p2"], false),
                (#"{"loc":{"$geoWithin":{"$centerSphere":[\#(gp(40, -74)),0.005]}}}"#, ["p0", "p1"], false),
                (#"{"loc":{"$nearSphere":\#(gp(40, -74)),"$maxDistanceInKilometers":100}}"#, ["p0", "p1", "p2"], true),
                (#"{"loc":{"$nearSphere":\#(gp(40.6, -73.4)),"$maxDistanceInMiles":200}}"#, ["p2", "p3", "p1", "p0"], true),
                (#"{"loc":{"$nearSphere":\#(gp(0, 180)),"$maxDistanceInRadians":0.01}}"#, ["p4", "p5"], true),
                (#"{"loc":{"$nearSphere":\#(gp(89, 0)),"$maxDistance":0.05}}"#, ["p7"], true),
                (#"{"loc":{"$nearSphere":\#(gp(-30, 150))},"cat":"b"}"#, ["p6", "p4", "p1"], true),
                (#"{"$or":[{"loc":{"$geoWithin":{"$centerSphere":[[151.2,-33.9],0.001]}}},{"name":"p8"}]}"#, ["p6", "p8"], false),
            ]
            let byId = { (r: FindResult) throws -> [String] in try r.objects().map { $0["name"]?.stringValue ?? "?" } }
            for (w, expected, ordered) in cases {
                for id in [Identity.master, .anonymous] {
                    let q = FindQuery(className: "Place", where: try JSON.parse(w), count: true)
                    let a = try byId(try p.sqlite.find(q, identity: id, afterFind: nil, afterFindApplies: nil))
                    let b = try byId(try p.pg.find(q, identity: id, afterFind: nil, afterFindApplies: nil))
                    #expect(ordered ? a == b : a.sorted() == b.sorted(), "\(w) as \(id)")
                    #expect((ordered ? b : b.sorted()) == expected, "\(w)")
                }
            }
            // Polygons: points within one, and polygons holding a point (edges count as inside),
            // checked against hand-worked answers on both backends (SQLite's `mb_polygon_contains`
            // must reach the reader this thread opened when its store was created).
            let square = "[[39.9,-74.1],[39.9,-73.0],[41.1,-73.0],[41.1,-74.1]]"
            let triangle = "[[39.9,-74.1],[40.6,-74.1],[39.9,-73.4]]"
            try p.add("z1", #"{"name":"z1","area":{"__type":"Polygon","coordinates":\#(square)}}"#, className: "Zone")
            try p.add("z2", #"{"name":"z2","area":{"__type":"Polygon","coordinates":\#(triangle)}}"#, className: "Zone")
            try p.add("z3", #"{"name":"z3"}"#, className: "Zone")
            try p.copy("Zone")
            let polygonCases: [(String, String, [String])] = [
                ("Place", #"{"loc":{"$geoWithin":{"$polygon":\#(triangle)}}}"#, ["p0", "p1"]),
                ("Place", #"{"loc":{"$geoWithin":{"$polygon":\#(square)}},"cat":"a"}"#, ["p0", "p2", "p3"]),
                ("Place", #"{"loc":{"$geoWithin":{"$polygon":{"__type":"Polygon","coordinates":[[-1,179],[1,179],[1,179.95],[-1,179.95]]}}}}"#, ["p4"]),
                ("Zone", #"{"area":{"$geoIntersects":{"$point":\#(gp(40, -74))}}}"#, ["z1", "z2"]),
                ("Zone", #"{"area":{"$geoIntersects":{"$point":\#(gp(40.5, -73.5))}}}"#, ["z1"]),
                ("Zone", #"{"area":{"$geoIntersects":{"$point":\#(gp(39.9, -73.5))}}}"#, ["z1", "z2"]),
                ("Zone", #"{"area":{"$geoIntersects":{"$point":\#(gp(0, 0))}}}"#, []),
            ]
            for (cls, w, expected) in polygonCases {
                let q = FindQuery(className: cls, where: try JSON.parse(w))
                let a = try byId(try p.sqlite.find(q, identity: .master, afterFind: nil, afterFindApplies: nil)).sorted()
                let b = try byId(try p.pg.find(q, identity: .master, afterFind: nil, afterFindApplies: nil)).sorted()
                #expect(a == expected, "SQLite \(cls) \(w)")
                #expect(b == expected, "\(cls) \(w)")
            }
            // An explicit order wins over nearest-first; limit and skip apply after it.
            var q = FindQuery(className: "Place", where: try JSON.parse(#"{"loc":{"$nearSphere":\#(gp(40, -74))}}"#), limit: 3, skip: 1)
            q.order = [SortKey(field: "name", descending: true)]
            #expect(try byId(p.pg.find(q, identity: .master, afterFind: nil, afterFindApplies: nil)) == ["p6", "p5", "p4"])
            for bad in [#"{"loc":{"$within":{"$box":[1]}}}"#, #"{"loc":{"$maxDistance":1}}"#, #"{"name":{"$nearSphere":\#(gp(0, 0))}}"#,
                        #"{"loc":{"$nearSphere":\#(gp(0, 0))},"$or":[{"loc":{"$nearSphere":\#(gp(1, 1))}}]}"#] {
                let q = FindQuery(className: "Place", where: try JSON.parse(bad))
                switch (Self.find(p.sqlite, q, .master), Self.find(p.pg, q, .master)) {
                case (.failure(let a), .failure(let b)): #expect(a.code == b.code, "\(bad)")
                case (let s, let g): Issue.record("\(bad): SQLite \(s) vs PostgreSQL \(g)")
                }
            }
        }

        @Test func innerQueriesSelectTheSameObjectsAsSQLite() throws {
            let p = try Pair()
            try p.add("ann", #"{"name":"Ann","city":"Oslo","born":{"__type":"Date","iso":"1990-01-01T00:00:00.000Z"}}"#, className: "Person")
            try p.add("bob", #"{"name":"Bob","city":"Rome"}"#, acl: #"{"u1":{"read":true}}"#, className: "Person")
            try p.add("cid", #"{"name":"Cid","city":"Oslo"}"#, className: "Person")
            let person = { (n: String) in #"{"__type":"Pointer","className":"Person","objectId":"@\#(n)@"}"# }
            try p.add("i1", #"{"title":"Oslo","owner":\#(person("ann")),"owners":[\#(person("ann")),"x"]}"#)
            try p.add("i2", #"{"title":"Rome","owner":\#(person("bob")),"owners":[\#(person("bob")),\#(person("cid"))]}"#)
            try p.add("i3", #"{"title":"Paris","owner":\#(person("cid"))}"#)
            try p.add("i4", #"{"title":"Bob"}"#)
            // A Relation from i1 to Ann and Cid.
            _ = try p.sqlite.update("Post", objectId: p.ids["i1"]!, changes: try JSON.parse(
                #"{"likes":{"__op":"AddRelation","objects":[\#(person("ann").replacingOccurrences(of: "@ann@", with: p.ids["ann"]!)),\#(person("cid").replacingOccurrences(of: "@cid@", with: p.ids["cid"]!))]}}"#).objectValue!,
                identity: .master)
            try p.copy("Person")
            try p.copy("Post")
            // The join table in the SQLite layout's form (the document side makes it on PostgreSQL).
            try p.pg.pool.withConnection { (c) throws(ParseError) in
                let j = Naming.joinTable("Post", "likes")
                try c.executeScript("CREATE TABLE \(j)(owningId text NOT NULL, relatedId text NOT NULL, PRIMARY KEY(owningId, relatedId))")
                for r in ["ann", "cid"] {
                    _ = try c.execute("INSERT INTO \(j)(owningId, relatedId) VALUES ($1, $2)", [.text(p.ids["i1"]!), .text(p.ids[r]!)])
                }
            }
            let i1 = #"{"__type":"Pointer","className":"Post","objectId":"\#(p.ids["i1"]!)"}"#
            let cases: [(String, String, [String])] = [
                ("Post", #"{"owner":{"$inQuery":{"className":"Person","where":{"city":"Oslo"}}}}"#, ["i1", "i3"]),
                ("Post", #"{"owner":{"$notInQuery":{"className":"Person","where":{"city":"Oslo"}}}}"#, ["i2", "i4"]),
                ("Post", #"{"owner":{"$inQuery":{"className":"Person","where":{"name":"Bob"}}}}"#, ["i2"]),
                ("Post", #"{"owners":{"$inQuery":{"className":"Person","where":{"name":{"$in":["Cid","Ann"]}}}}}"#, ["i1", "i2"]),
                ("Post", #"{"title":{"$select":{"query":{"className":"Person","where":{}},"key":"city"}}}"#, ["i1", "i2"]),
                ("Post", #"{"title":{"$dontSelect":{"query":{"className":"Person","where":{}},"key":"name"}}}"#, ["i1", "i2", "i3"]),
                ("Post", #"{"owner":{"$select":{"query":{"className":"Person","where":{"city":"Rome"}},"key":"objectId"}}}"#, ["i2"]),
                ("Post", #"{"owner":{"$inQuery":{"className":"Nope","where":{}}}}"#, []),
                ("Person", #"{"$relatedTo":{"object":\#(i1),"key":"likes"}}"#, ["ann", "cid"]),
                ("Person", #"{"$relatedTo":{"object":\#(i1),"key":"likes"},"city":"Oslo","name":{"$ne":"Ann"}}"#, ["cid"]),
                ("Person", #"{"born":{"$select":{"query":{"className":"Person","where":{"name":"Ann"}},"key":"born"}}}"#, ["ann"]),
            ]
            let byId = Dictionary(uniqueKeysWithValues: p.ids.map { ($1, $0) })
            for (cls, w, expected) in cases {
                for id in Self.identities {
                    let q = FindQuery(className: cls, where: try JSON.parse(w))
                    let a = try p.sqlite.find(q, identity: id, afterFind: nil, afterFindApplies: nil).objects().map { byId[$0["objectId"]?.stringValue ?? ""] ?? "?" }
                    let b = try p.pg.find(q, identity: id, afterFind: nil, afterFindApplies: nil).objects().map { byId[$0["objectId"]?.stringValue ?? ""] ?? "?" }
                    #expect(a.sorted() == b.sorted(), "\(cls) \(w) as \(id)")
                    if id == .master { #expect(b.sorted() == expected, "\(cls) \(w)") }
                }
            }
            for bad in [#"{"owner":{"$inQuery":{"className":"_mb_x","where":{}}}}"#, #"{"owner":{"$inQuery":{"where":{}}}}"#,
                        #"{"owner":{"$select":{"query":{"className":"Person"},"key":"name","x":1}}}"#,
                        #"{"$relatedTo":{"object":\#(i1),"key":"title"}}"#] {
                let q = FindQuery(className: "Post", where: try JSON.parse(bad))
                switch (Self.find(p.sqlite, q, .anonymous), Self.find(p.pg, q, .anonymous)) {
                case (.failure(let a), .failure(let b)): #expect(a.code == b.code, "\(bad)")
                case (let s, let g): Issue.record("\(bad): SQLite \(s) vs PostgreSQL \(g)")
                }
            }
        }

        @Test func writableIdsAreTheObjectsSQLiteDeletes() throws {
            let p = try Self.fixture()
            func writable(_ w: String, _ id: Identity) throws -> [String] {
                let byId = Dictionary(uniqueKeysWithValues: p.ids.map { ($1, $0) })
                return try p.pg.pool.withConnection { (c) throws(ParseError) -> [String] in
                    try PostgresQuery.writableIds("Post", where: try JSON.parse(w), op: .delete, identity: id, store: p.pg, on: c)
                }.map { byId[$0] ?? "?" }.sorted()
            }
            #expect(try writable("{}", .master) == ["a", "b", "c", "d", "e", "f", "g", "h"])
            #expect(try writable("{}", .anonymous) == ["a", "b", "c", "d"])
            #expect(try writable("{}", .user("u1")) == ["a", "b", "c", "d", "e"])
            #expect(try writable(#"{"likes":{"$gte":5}}"#, .user("u1")) == ["b", "e"])
            #expect(try writable(#"{"nope":1}"#, .master) == [])
            // SQLite's set-based delete removes exactly those objects.
            for (w, id) in [(#"{"likes":{"$gte":5}}"#, Identity.user("u1")), (#"{"likes":{"$lt":5}}"#, Identity.anonymous)] {
                let expected = try writable(w, id).count
                #expect(try p.sqlite.deleteWhere("Post", where: try JSON.parse(w), identity: id) == expected)
            }
        }

        @Test func countDistinctAndAfterFindMatchSQLite() throws {
            let p = try Self.fixture()
            for w in [#"{}"#, #"{"likes":{"$gt":2}}"#, #"{"tags":{"$exists":true}}"#] {
                for id in Self.identities {
                    let where_ = try JSON.parse(w)
                    #expect(try p.sqlite.count("Post", where: where_, identity: id) == p.pg.count("Post", where: where_, identity: id))
                    for field in ["likes", "tags", "title", "author", "meta.n", "objectId", "due", "flag"] {
                        let a = try p.sqlite.distinct("Post", field: field, where: where_, identity: id).map { Self.canon($0) }
                        let b = try p.pg.distinct("Post", field: field, where: where_, identity: id).map { Self.canon($0) }
                        #expect(Set(a) == Set(b) && a.count == b.count, "distinct \(field) where \(w) as \(id)")
                    }
                }
            }
            #expect(try p.pg.count("Nope", where: nil, identity: .master) == 0)
            #expect(try p.pg.find(FindQuery(className: "Nope"), identity: .master, afterFind: nil, afterFindApplies: nil).resultCount == 0)
            // afterFind edits the results of the classes it applies to.
            let hook: AfterFindHook = { (_: String, objs: [JSONObject]) throws(ParseError) -> [JSONObject] in
                objs.filter { $0["likes"]?.intValue == 10 }.map { var o = $0; o["seen"] = true; return o }
            }
            let r = try p.pg.find(FindQuery(className: "Post"), identity: .master, afterFind: hook, afterFindApplies: { $0 == "Post" }).objects()
            #expect(r.count == 2 && r.allSatisfy { $0["seen"] == true })
            let untouched = try p.pg.find(FindQuery(className: "Post"), identity: .master, afterFind: hook, afterFindApplies: { _ in false })
            #expect(untouched.resultCount == 8)
        }
    }
}
