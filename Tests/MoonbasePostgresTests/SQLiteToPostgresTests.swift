import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import MoonbaseSQLite
import MoonbaseStore
import Testing

/// `SQLiteToPostgres` (`moonbase migrate`) from a real SQLite file into a real, empty PostgreSQL
/// database of the cluster: the copy keeps what both stores answer, refuses a non-empty target,
/// and a failed copy leaves the target untouched.
extension PostgresSuite {
    @Suite struct SQLiteToPostgresTests {
        /// A SQLite store in a fresh temporary directory (removed by `cleanup`).
        static func sqliteStore() throws -> (SQLiteDocumentStore, cleanup: () -> Void) {
            let dir = NSTemporaryDirectory() + "mb-migrate-\(UUID().uuidString.prefix(8))"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            let store = try SQLiteDocumentStore(path: dir + "/moonbase.sqlite")
            return (store, { store.close(); try? FileManager.default.removeItem(atPath: dir) })
        }

        static func ids(_ r: FindResult) throws -> [String] {
            try JSON.parse(r.results).arrayValue?.compactMap { $0["objectId"]?.stringValue } ?? []
        }

        static func internalTables(_ store: SQLiteDocumentStore) throws -> [String] {
            try store.database.read { (c) throws(ParseError) -> [String] in
                var names: [String] = []
                try c.query("SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, 4) = '_mb_' ORDER BY name") { (r) throws(ParseError) in
                    if let n = r.text(0), !n.hasPrefix("_mb_join:") { names.append(n) }
                }
                return names
            }
        }

        /// A table added to the SQLite store without a decision in `internalTables` must fail
        /// here (and `migrate` refuses to run), never be dropped silently by a copy.
        @Test func everyInternalTableIsKnownAndHasAPostgresCounterpart() throws {
            let (lite, cleanup) = try Self.sqliteStore()
            defer { cleanup() }
            let tables = try Self.internalTables(lite)
            #expect(tables.contains("_mb_files"))
            for t in tables { #expect(SQLiteToPostgres.internalTables[t] != nil, "migrate does not handle \(t)") }
            let pg = try PostgresStore(url: freshDatabaseURL())
            let pgTables = Set(try pg.pool.withConnection { (c) throws(ParseError) in
                try c.execute("SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema()").rows.compactMap { $0[0].string }
            })
            for (t, how) in SQLiteToPostgres.internalTables where how == .copy {
                #expect(pgTables.contains(t), "\(t) is copied but PostgreSQL has no such table")
            }
        }

        @Test func copyKeepsObjectsSchemasRelationsIndexesAndTables() throws {
            let (lite, cleanup) = try Self.sqliteStore()
            defer { cleanup() }
            let alice = try lite.insert("Person", fields: ["name": "alice"], acl: nil, identity: .master)
            let bob = try lite.insert("Person", fields: ["name": "bob"],
                                      acl: ["*": ["read": true], "role:Admins": ["write": true]], identity: .master)
            let when: JSONValue = ["__type": "Date", "iso": "2026-01-02T03:04:05.678Z"]
            let group = try lite.insert("Group", fields: [
                "title": "Climbers of the north face", "at": ["__type": "GeoPoint", "latitude": 46.5, "longitude": 8.0],
                "since": when, "owner": ["__type": "Pointer", "className": "Person", "objectId": .string(alice.objectId)],
                "members": ["__op": "AddRelation", "objects": [
                    ["__type": "Pointer", "className": "Person", "objectId": .string(alice.objectId)],
                    ["__type": "Pointer", "className": "Person", "objectId": .string(bob.objectId)]]],
            ], acl: ["\(alice.objectId)": ["read": true, "write": true]], identity: .master)
            _ = try lite.update("Person", objectId: bob.objectId, changes: ["name": "bobby"], identity: .master)
            try lite.setIndexes("Person", ["uniq_name": ["fields": ["name": 1], "unique": true]])
            try lite.setIndexes("Group", ["text_title": ["title": "text"]])
            try lite.setClassPermissions("Group", ["find": ["requiresAuthentication": true], "get": ["*": true]])
            try lite.updateConfig([.set("welcome", "hi"), .set("limits", ["max": 3]), .masterKeyOnly("limits", true)])
            try lite.recordFile(name: "abc_photo.png", contentType: "image/png", size: 12, createdAt: 1_000)
            let head = try lite.changeFeedHead()
            #expect(head >= 4)

            let url = try freshDatabaseURL()
            #expect(try SQLiteToPostgres.nonEmptyReason(url: url) == nil)
            let pg = try PostgresStore(url: url)
            var lines: [String] = []
            let summary = try SQLiteToPostgres(source: lite, target: pg).run { lines.append($0) }
            let rows = Dictionary(summary.tables.map { ($0.name, $0.rows) }, uniquingKeysWith: +)
            #expect(rows["Person"] == 2 && rows["Group"] == 1 && rows["_mb_join:Group:members"] == 2)
            #expect(rows["_mb_files"] == 1 && rows["_mb_config"] == 2)
            #expect(lines.contains("Person: 2 objects"))

            // Schemas (fields in order, indexes, permissions) and every object as stored.
            for cls in ["Person", "Group"] {
                #expect(pg.schema(cls) == lite.schema(cls))
            }
            for (cls, id) in [("Person", alice.objectId), ("Person", bob.objectId), ("Group", group.objectId)] {
                let a = try #require(try lite.fetchRaw(cls, objectId: id))
                let b = try #require(try pg.fetchRaw(cls, objectId: id))
                #expect(a.createdAt == b.createdAt && a.updatedAt == b.updatedAt)
                #expect(a.rperm == b.rperm && a.wperm == b.wperm)
                #expect(try a.fields() == b.fields())
                #expect(a.acl.map { try? JSON.parse($0) } == b.acl.map { try? JSON.parse($0) })
            }
            // The relation, the declared indexes (unique enforced, text searchable), the ACLs.
            let related = try pg.find(FindQuery(className: "Person", where: ["$relatedTo": [
                "object": ["__type": "Pointer", "className": "Group", "objectId": .string(group.objectId)], "key": "members"]],
                order: [SortKey(field: "name", descending: false)]), identity: .master, afterFind: nil, afterFindApplies: nil)
            #expect(try Self.ids(related) == [alice.objectId, bob.objectId])
            let dup = #expect(throws: ParseError.self) {
                _ = try pg.insert("Person", fields: ["name": "alice"], acl: nil, identity: .master)
            }
            #expect(dup?.code == .duplicateValue)
            let text = try pg.find(FindQuery(className: "Group", where: ["title": ["$text": ["$search": ["$term": "climbers"]]]]),
                                   identity: .master, afterFind: nil, afterFindApplies: nil)
            #expect(try Self.ids(text) == [group.objectId])
            #expect(try pg.get("Group", objectId: group.objectId, identity: .user(bob.objectId)) == nil)
            // Internal tables and the change feed, which numbers on after the copied seqs.
            #expect(try pg.configParameters() == lite.configParameters())
            #expect(try pg.fileContentType("abc_photo.png") == "image/png")
            #expect(try pg.changeFeedHead() == head)
            _ = try pg.insert("Person", fields: ["name": "carol"], acl: nil, identity: .master)
            #expect(try pg.changeFeedHead() > head)

            // A second copy into the same database is refused.
            #expect(try SQLiteToPostgres.nonEmptyReason(url: url) != nil)
            let again = #expect(throws: ParseError.self) {
                _ = try SQLiteToPostgres(source: lite, target: pg).run { _ in }
            }
            #expect(again?.code == .commandUnavailable)
        }

        /// One transaction: a document PostgreSQL cannot hold (U+0000) fails the copy with 107
        /// naming the object, and the target keeps no class table, row or schema.
        @Test func aFailedCopyLeavesTheTargetEmpty() throws {
            let (lite, cleanup) = try Self.sqliteStore()
            defer { cleanup() }
            for i in 0..<1_200 { _ = try lite.insert("Item", fields: ["n": .int(Int64(i))], acl: nil, identity: .master) }
            let bad = try lite.insert("Zed", fields: ["s": "a\u{0}b"], acl: nil, identity: .master)
            let url = try freshDatabaseURL()
            let pg = try PostgresStore(url: url)
            let error = #expect(throws: ParseError.self) {
                _ = try SQLiteToPostgres(source: lite, target: pg).run { _ in }
            }
            #expect(error?.code == .invalidJSON)
            #expect(error?.message.contains(bad.objectId) == true)
            #expect(try SQLiteToPostgres.nonEmptyReason(url: url) == nil)
            let tables = try pg.pool.withConnection { (c) throws(ParseError) in
                try c.execute("SELECT count(*)::int8 FROM pg_tables WHERE tablename IN ('Item', 'Zed')").scalar?.int64
            }
            #expect(tables == 0)
        }
    }
}
