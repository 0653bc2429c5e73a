import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import MoonbaseSQLite
import MoonbaseStore
import Testing

/// A `PostgresStore` on a new, empty database of the run's cluster, and that database's URL
/// (for a second "host" on the same database).
func freshPostgresStore() throws -> (PostgresStore, url: String) {
    let name = uniqueTable("mbdb")
    let admin = try PGConnection(url: PGTestCluster.url)
    defer { admin.close() }
    try admin.executeScript("CREATE DATABASE \(name)")
    let base = PGTestCluster.url
    let url = String(base[..<base.lastIndex(of: "/")!]) + "/" + name
    return (try PostgresStore(url: url), url)
}

/// The Parse code `body` fails with, or nil when it succeeds.
func errorCode(_ body: () throws(ParseError) -> Void) -> Int? {
    do { try body() } catch { return error.code.rawValue }
    return nil
}

/// The document writes both backends offer, for running one script against each.
protocol ParityStore {
    func insert(_ className: String, fields: JSONObject, acl: JSONValue?, identity: Identity) throws(ParseError) -> StoredObject
    func update(_ className: String, objectId: String, changes: JSONObject, identity: Identity) throws(ParseError) -> StoredObject
    func delete(_ className: String, objectId: String, identity: Identity) throws(ParseError)
    func get(_ className: String, objectId: String, identity: Identity) throws(ParseError) -> StoredObject?
    func setIndexes(_ className: String, _ specs: JSONObject) throws(ParseError)
    func setClassPermissions(_ className: String, _ clp: JSONObject) throws(ParseError)
    func getSchema(_ className: String) -> JSONValue?
    func roles(ofUser userId: String) throws(ParseError) -> [String]
    var classNames: [String] { get }
}

extension SQLiteDocumentStore: ParityStore {}
extension PostgresStore: ParityStore {}

/// Collects what a store publishes after its commits.
final class CollectingListener: ChangeListener, @unchecked Sendable {
    let observed: Set<String>
    private let lock = NSLock()
    private var batches: [[ChangeEvent]] = []

    init(observing: Set<String>) { observed = observing }
    func observes(_ className: String) -> Bool { observed.contains(className) }
    func publish(_ events: [ChangeEvent]) { lock.withLock { batches.append(events) } }
    var events: [ChangeEvent] { lock.withLock { batches.flatMap { $0 } } }
}

extension PostgresSuite {
    @Suite struct PostgresDocumentsTests {
        /// One step of a script: `$N` strings in JSON stand for the objectId of the N-th object
        /// the script created on that backend.
        enum Step {
            case insert(String, JSONValue, acl: JSONValue? = nil, as: Identity = .master)
            case update(String, Int, JSONValue, as: Identity = .master)
            case delete(String, Int, as: Identity = .master)
            case get(String, Int, as: Identity = .master)
            case indexes(String, JSONValue)
            case clp(String, JSONValue)
            case schema(String)
            case roles(String)
        }

        static let u1 = Identity.user("u1")
        static let u2 = Identity.user("u2")

        /// Parse semantics exercised on both backends: types and the first-value rule, every
        /// operator, nested keys, ACLs, CLP, pointer permissions, unique indexes, roles and
        /// their hierarchy, relations and their cleanup, the schema document.
        static let script: [Step] = [
            .insert("Post", ["title": "a", "n": 1, "tags": ["x"], "when": ["__type": "Date", "iso": "2026-01-02T03:04:05Z"],
                             "author": ["__type": "Pointer", "className": "_User", "objectId": "u1"],
                             "meta": ["a": ["b": 1]]], as: u1),
            .insert("Post", ["n": "str"]),
            .insert("Post", ["objectId": "x"]),
            .insert("Post", ["bad-name": 1]),
            .update("Post", 0, ["n": ["__op": "Increment", "amount": 2], "tags": ["__op": "AddUnique", "objects": ["x", "y"]],
                                "meta.a.c": 5, "stats.views": 1, "title": ["__op": "Delete"]], as: u1),
            .update("Post", 0, ["tags": ["__op": "Remove", "objects": ["x"]]], as: u2),
            .get("Post", 0, as: u2),
            .insert("Post", ["title": "private"], acl: ["u1": ["read": true, "write": true]], as: u1),
            .get("Post", 1, as: u2),
            .get("Post", 1, as: .anonymous),
            .get("Post", 1, as: u1),
            .update("Post", 0, ["n": ["__op": "Increment", "amount": 1.5]]),
            .update("Post", 0, ["tags": ["__op": "Increment", "amount": 1]]),
            .update("Post", 0, ["tags": ["__op": "Add", "objects": [1, ["k": "v"]]], "meta.a.b": ["__op": "Delete"]]),
            .update("Post", 0, ["when": "not a date"]),
            .update("Post", 0, ["ACL": ["*": ["read": true], "u2": ["write": true]]]),
            .update("Post", 0, ["n": ["__op": "Increment", "amount": -10]], as: u2),
            .indexes("Post", ["uniq": ["fields": ["slug": 1], "unique": true], "byAuthor": ["author": 1, "when": -1]]),
            .insert("Post", ["slug": "s"]),
            .insert("Post", ["slug": "s"]),
            .indexes("Post", ["byAuthor": ["__op": "Delete"], "bad": ["x": 2]]),
            .schema("Post"),
            .clp("Secret", ["create": ["role:Admin": true], "get": ["requiresAuthentication": true]]),
            .insert("Secret", ["v": 1], as: u1),
            .insert("Secret", ["v": 1]),
            .get("Secret", 3, as: .anonymous),
            .get("Secret", 3, as: u1),
            .clp("Doc", ["update": ["pointerFields": ["owner"]], "delete": ["pointerFields": ["owner"]]]),
            .insert("Doc", ["owner": ["__type": "Pointer", "className": "_User", "objectId": "u2"]],
                    acl: ["*": ["read": true, "write": true]]),
            .update("Doc", 4, ["v": 1], as: u1),
            .update("Doc", 4, ["v": 2], as: u2),
            .delete("Doc", 4, as: u1),
            .delete("Post", 0, as: u1),
            .delete("Post", 0, as: u2),
            .get("Post", 0),
            .delete("Post", 0),
            .insert("_Role", ["name": "Admin"]),
            .insert("_Role", ["name": "bad/name"], acl: ["*": ["read": true]]),
            .insert("_Role", ["name": "Admin", "users": ["__op": "AddRelation", "objects": [["__type": "Pointer", "className": "_User", "objectId": "u1"]]]],
                    acl: ["*": ["read": true]]),
            .insert("_Role", ["name": "Admin"], acl: ["*": ["read": true]]),
            .update("_Role", 5, ["name": "Other"]),
            .insert("_Role", ["name": "Mod", "roles": ["__op": "AddRelation", "objects": [["__type": "Pointer", "className": "_Role", "objectId": "$5"]]]],
                    acl: ["*": ["read": true]]),
            .roles("u1"),
            .insert("Secret", ["v": 2], as: .user("u1", roles: ["Admin"])),
            .update("_Role", 5, ["users": ["__op": "RemoveRelation", "objects": [["__type": "Pointer", "className": "_User", "objectId": "u1"]]]]),
            .roles("u1"),
            .update("_Role", 5, ["users": ["__op": "AddRelation", "objects": [["__type": "Pointer", "className": "_User", "objectId": "u1"]]]]),
            .roles("u1"),
            .delete("_Role", 5),
            .roles("u1"),
            .schema("_Role"),
            .schema("Nope"),
            // A unique index admits many objects without a value (null or missing).
            .insert("Post", ["slug": .null]),
            .insert("Post", ["slug": .null]),
            .insert("Post", ["other": 1]),
            // An index declared before its field's type is known is rebuilt when it is.
            .indexes("Later", ["byRef": ["ref": 1]]),
            .insert("Later", ["ref": ["__type": "Pointer", "className": "Post", "objectId": "p1"]]),
        ]

        /// What one step gave: an object's fields (master view, without ids and times), an error
        /// code, nothing, or a value.
        static func run(_ store: some ParityStore, _ steps: [Step]) -> [String] {
            var ids: [String] = []
            func resolve(_ v: JSONValue) -> JSONValue {
                switch v {
                case .string(let s) where s.hasPrefix("$"): return .string(Int(s.dropFirst()).map { ids[$0] } ?? s)
                case .array(let a): return .array(a.map(resolve))
                case .object(let o): return .object(JSONObject(o.entries.map { .init($0.key, resolve($0.value)) }))
                default: return v
                }
            }
            func show(_ o: StoredObject?) -> String {
                guard let o, var j = try? o.json(for: .master) else { return "nil" }
                for k in ["objectId", "createdAt", "updatedAt"] { j.removeValue(forKey: k) }
                return canonical(.object(j))
            }
            var out: [String] = []
            for step in steps {
                do throws(ParseError) {
                    switch step {
                    case .insert(let c, let f, let acl, let who):
                        let o = try store.insert(c, fields: resolve(f).objectValue!, acl: acl, identity: who)
                        ids.append(o.objectId)
                        out.append(show(o))
                    case .update(let c, let i, let f, let who):
                        out.append(show(try store.update(c, objectId: ids[i], changes: resolve(f).objectValue!, identity: who)))
                    case .delete(let c, let i, let who):
                        try store.delete(c, objectId: ids[i], identity: who)
                        out.append("deleted")
                    case .get(let c, let i, let who):
                        out.append(show(try store.get(c, objectId: ids[i], identity: who)))
                    case .indexes(let c, let s):
                        try store.setIndexes(c, s.objectValue!)
                        out.append("ok")
                    case .clp(let c, let s):
                        try store.setClassPermissions(c, s.objectValue!)
                        out.append("ok")
                    case .schema(let c):
                        out.append(store.getSchema(c).map(canonical) ?? "nil")
                    case .roles(let u):
                        out.append(try store.roles(ofUser: u).joined(separator: ","))
                    }
                } catch {
                    out.append("error \(error.code.rawValue)")
                }
            }
            return out
        }

        /// JSON with object keys sorted (PostgreSQL's `jsonb` keeps its own key order).
        static func canonical(_ v: JSONValue) -> String {
            switch v {
            case .object(let o):
                return "{" + o.entries.sorted { $0.key < $1.key }.map { "\($0.key):\(canonical($0.value))" }.joined(separator: ",") + "}"
            case .array(let a): return "[" + a.map(canonical).joined(separator: ",") + "]"
            default: return v.jsonString
            }
        }

        @Test func theSameScriptGivesTheSameResultsOnSQLiteAndPostgreSQL() throws {
            let path = NSTemporaryDirectory() + "mb-parity-\(UUID().uuidString).sqlite"
            defer { for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + s) } }
            let sqlite = try SQLiteDocumentStore(database: Database(path: path))
            defer { sqlite.close() }
            let (pg, _) = try freshPostgresStore()
            defer { pg.close() }
            let expected = Self.run(sqlite, Self.script)
            let got = Self.run(pg, Self.script)
            #expect(got.count == Self.script.count)
            for i in 0..<min(expected.count, got.count) {
                #expect(got[i] == expected[i], "step \(i): \(Self.script[i])")
            }
            #expect(pg.classNames == sqlite.classNames)
            // The script's own checks, so a change that broke both alike still fails.
            #expect(expected[1] == "error 111" && expected[2] == "error 105" && expected[3] == "error 105")
            #expect(expected[5] == "error 101" && expected[8] == "nil" && expected[10] != "nil")
            #expect(expected[19] == "error 137" && expected[23] == "error 119" && expected[29] == "error 101")
            #expect(expected[42] == "Admin,Mod" && expected[45] == "" && expected[47] == "Admin,Mod" && expected[49] == "")
            #expect(!expected[52...].contains { $0.hasPrefix("error") })
            // A deleted role's join rows are gone (the owner and target triggers); declared
            // indexes are type-aware expression indexes.
            try pg.pool.withConnection { (c) throws(ParseError) in
                func def(_ name: String) throws(ParseError) -> String {
                    try c.execute("SELECT indexdef FROM pg_indexes WHERE indexname = $1", [.text(name)]).scalar?.string ?? "none"
                }
                #expect(try def("Post__idx__uniq").contains("CREATE UNIQUE INDEX"))
                #expect(try def("Post__idx__byAuthor").contains("'{author,objectId}'"))
                #expect(try def("Later__idx__byRef").contains("'{ref,objectId}'"))
                #expect(try c.execute("SELECT count(*) FROM \"_mb_join:_Role:users\"").scalar == .integer(0))
                #expect(try c.execute("SELECT count(*) FROM \"_mb_join:_Role:roles\"").scalar == .integer(0))
            }
        }

        @Test func aTransactionCommitsOrRollsBackAsOneAndRunsItsHooksAfterCommit() throws {
            let (store, _) = try freshPostgresStore()
            defer { store.close() }
            let hooks = Locked<[String]>([])
            #expect(!store.inTransaction)
            let kept = try store.transaction { () throws(ParseError) -> StoredObject in
                #expect(store.inTransaction)
                let o = try store.insert("Item", fields: ["n": 1], acl: nil, identity: .master)
                store.afterCommit { hooks.update { $0.append("committed") } }
                #expect(hooks.get.isEmpty)
                // Reads inside see the transaction's own writes.
                #expect(try store.fetchRaw("Item", objectId: o.objectId) != nil)
                // A nested failure rolls back only its own part when caught.
                do throws(ParseError) {
                    try store.transaction { () throws(ParseError) in
                        _ = try store.insert("Item", fields: ["n": 2], acl: nil, identity: .master)
                        throw ParseError(.scriptFailed, "inner")
                    }
                } catch {}
                return o
            }
            #expect(hooks.get == ["committed"])
            #expect(try store.get("Item", objectId: kept.objectId, identity: .master) != nil)
            let lost = Locked<String>("")
            let code = errorCode { () throws(ParseError) in
                try store.transaction { () throws(ParseError) in
                    let id = try store.insert("Item", fields: ["n": 3], acl: nil, identity: .master).objectId
                    lost.update { $0 = id }
                    _ = try store.update("Item", objectId: kept.objectId, changes: ["n": 10], identity: .master)
                    store.afterCommit { hooks.update { $0.append("never") } }
                    throw ParseError(.scriptFailed, "roll back")
                }
            }
            #expect(code == 141)
            #expect(hooks.get == ["committed"])
            #expect(try store.fetchRaw("Item", objectId: lost.get) == nil)
            #expect(try store.fetchRaw("Item", objectId: kept.objectId)?.fields()["n"] == .int(1))
            try store.pool.withConnection { (c) throws(ParseError) in
                #expect(try c.execute("SELECT count(*) FROM \"Item\"").scalar == .integer(1))
            }
            // A schema change rolled back leaves no trace either.
            #expect(errorCode { () throws(ParseError) in
                try store.transaction { () throws(ParseError) in
                    _ = try store.insert("Ghost", fields: ["n": 1], acl: nil, identity: .master)
                    throw ParseError(.scriptFailed, "roll back")
                }
            } == 141)
            #expect(store.schema("Ghost") == nil)
            #expect(!store.classNames.contains("Ghost"))
        }

        @Test func concurrentIncrementsOfOneObjectAreNeverLost() throws {
            let (store, _) = try freshPostgresStore()
            defer { store.close() }
            let o = try store.insert("Counter", fields: ["n": 0], acl: nil, identity: .master)
            let failures = Locked<[String]>([])
            let groups = (0..<6).map { _ in
                onThread {
                    for _ in 0..<15 {
                        do throws(ParseError) {
                            _ = try store.update("Counter", objectId: o.objectId, changes: ["n": ["__op": "Increment", "amount": 1]],
                                                 identity: .master)
                        } catch {
                            failures.update { $0.append(error.message) }
                        }
                    }
                }
            }
            for g in groups { g.wait() }
            #expect(failures.get.isEmpty)
            #expect(try store.fetchRaw("Counter", objectId: o.objectId)?.fields()["n"] == .int(90))
        }

        @Test func twoHostsOnOneDatabaseShareTheSchema() throws {
            let (a, url) = try freshPostgresStore()
            defer { a.close() }
            let b = try PostgresStore(url: url)
            defer { b.close() }
            _ = try a.insert("Post", fields: ["x": 1], acl: nil, identity: .master)
            // B never saw Post: it finds it in the database.
            #expect(b.schema("Post")?.fields["x"]?.type == .number)
            // Each host adds a field from its own (older) copy: both fields are kept.
            _ = try a.insert("Post", fields: ["fromA": "a"], acl: nil, identity: .master)
            _ = try b.insert("Post", fields: ["fromB": true], acl: nil, identity: .master)
            let c = try PostgresStore(url: url)
            defer { c.close() }
            #expect(Set(c.schema("Post")!.fieldOrder) == ["x", "fromA", "fromB"])
            // A field another host typed keeps its type here too.
            #expect(errorCode { () throws(ParseError) in _ = try b.insert("Post", fields: ["fromA": 5], acl: nil, identity: .master) } == 111)
            // Concurrent first writes of one new class from both hosts: one table, both fields.
            let errors = Locked<[String]>([])
            let g1 = onThread {
                do throws(ParseError) { _ = try a.insert("Fresh", fields: ["p": 1], acl: nil, identity: .master) } catch { errors.update { $0.append(error.message) } }
            }
            let g2 = onThread {
                do throws(ParseError) { _ = try b.insert("Fresh", fields: ["q": 1], acl: nil, identity: .master) } catch { errors.update { $0.append(error.message) } }
            }
            g1.wait()
            g2.wait()
            #expect(errors.get.isEmpty)
            let d = try PostgresStore(url: url)
            defer { d.close() }
            #expect(Set(d.schema("Fresh")!.fieldOrder) == ["p", "q"])
        }

        /// A host's copy of a schema follows changes made on another host (fields, class
        /// permissions, indexes) within seconds, through the schema notifications.
        @Test func aSchemaChangeOnOneHostReachesTheOthers() throws {
            let (a, url) = try freshPostgresStore()
            defer { a.close() }
            let b = try PostgresStore(url: url)
            defer { b.close() }
            _ = try a.insert("Post", fields: ["x": 1], acl: nil, identity: .master)
            #expect(b.schema("Post")?.fieldOrder == ["x"])
            #expect(errorCode { () throws(ParseError) in try b.checkCLP(.find, "Post", .anonymous) } == nil)
            _ = try a.insert("Post", fields: ["y": "text"], acl: nil, identity: .master)
            try a.setClassPermissions("Post", ["find": ["requiresAuthentication": true]])
            try a.setIndexes("Post", ["byY": ["y": 1]])
            #expect(eventually(seconds: 10) { b.schema("Post")?.fields["y"]?.type == .string })
            #expect(eventually(seconds: 10) {
                errorCode { () throws(ParseError) in try b.checkCLP(.find, "Post", .anonymous) } == 119
            })
            #expect(eventually(seconds: 10) { b.getSchema("Post")?["indexes"]?["byY"] != nil })
            // A copy dropped after a lost listening connection is read again.
            b.invalidateSchemas()
            #expect(b.schema("Post")?.fieldOrder == ["x", "y"])
        }

        @Test func aRoleNameIsUniqueAcrossHosts() throws {
            let (a, url) = try freshPostgresStore()
            defer { a.close() }
            let b = try PostgresStore(url: url)
            defer { b.close() }
            let codes = Locked<[Int]>([])
            let groups = [a, b, a, b].map { store in
                onThread {
                    do throws(ParseError) {
                        _ = try store.insert("_Role", fields: ["name": "Staff"], acl: ["*": ["read": true]], identity: .master)
                        codes.update { $0.append(0) }
                    } catch {
                        codes.update { $0.append(error.code.rawValue) }
                    }
                }
            }
            for g in groups { g.wait() }
            #expect(codes.get.sorted() == [0, 137, 137, 137])
        }

        @Test func requestIdsNULAndLifecycle() throws {
            let (store, _) = try freshPostgresStore()
            #expect(try store.recordRequestId("r1"))
            #expect(try !store.recordRequestId("r1"))
            #expect(try store.recordRequestId("r2"))
            #expect(errorCode { () throws(ParseError) in _ = try store.insert("Post", fields: ["s": "a\u{0}b"], acl: nil, identity: .master) } == 107)
            // A backslash before a literal "u0000" is not the NUL escape.
            let ok = try store.insert("Post", fields: ["s": "\\u0000"], acl: nil, identity: .master)
            #expect(try store.get("Post", objectId: ok.objectId, identity: .master)?.fields()["s"] == .string("\\u0000"))
            try store.checkpoint()
            store.close()
            #expect(errorCode { () throws(ParseError) in _ = try store.get("Post", objectId: ok.objectId, identity: .master) } == 1)
        }
    }
}
