import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbaseQuota
import MoonbaseSQLite
import Testing

@testable import MoonbaseStore

/// The one versioned migrator: a fresh database gets every internal table; a database left by
/// the previous release (version 1, the other tables made by their modules with
/// `IF NOT EXISTS`) opens, upgrades and keeps its rows; a step that fails changes nothing.
@Suite(.timeLimit(.minutes(1)))
struct MigratorTests {
    let dir: String
    var path: String { dir + "/moonbase.sqlite" }

    init() throws {
        dir = NSTemporaryDirectory() + "moonbase-migrator-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }

    static let internalTables = [
        "_mb_schema", "_mb_request_ids", "_mb_changes", "_mb_changes_meta", "_mb_usage", "_mb_usage_window",
        "_mb_auth_epoch", "_mb_login_failures", "_mb_files", "_mb_config", "_mb_email_tokens",
    ]
    static let internalIndexesAndTriggers = [
        "_mb_request_ids_at", "_mb_changes_cls_seq", "_mb_changes_obj", "_mb_changes_tomb", "_mb_usage_by_hour",
        "_mb_email_tokens_user", "_User__auth_email", "_User__auth_epoch_u", "_User__auth_epoch_d",
        "_Session__auth_epoch_u", "_Session__auth_epoch_d", "_User__auth_no_plain_i", "_User__auth_no_plain_u",
    ]

    func names(_ c: Connection) throws -> Set<String> {
        var out: Set<String> = []
        try c.query("SELECT name FROM sqlite_master") { s in out.insert(s.text(0) ?? "") }
        return out
    }

    func version(_ c: Connection) throws -> Int64? {
        if case .integer(let v)? = try c.scalar("PRAGMA user_version") { return v }
        return nil
    }

    @Test func freshDatabaseGetsEveryInternalTable() throws {
        let store = try SQLiteDocumentStore(path: path)
        let c = try Connection(path: path)
        defer { c.close() }
        let all = try names(c)
        for name in Self.internalTables + Self.internalIndexesAndTriggers {
            #expect(all.contains(name), "\(name) missing")
        }
        #expect(try version(c) == Migrator.currentVersion)
        #expect(try c.scalar("SELECT 1 FROM pragma_table_info('_mb_usage') WHERE name = 'events'") == .integer(1))
        #expect(Migrator.currentVersion == 5)
        // The tables work through the store's protocols.
        try store.updateConfig([.set("greeting", "hi")])
        #expect(try store.configParameters() == [ConfigParameter(name: "greeting", value: "hi", masterKeyOnly: false)])
        #expect(try store.authEpoch() == 0)
        store.database.close()
    }

    /// What the previous release left: version 1 tables from the migrator, every other internal
    /// table as its module created it (`_mb_usage` from before its `events` column), and rows.
    func writePreviousReleaseDatabase(duplicateEmails: Bool = false) throws {
        let c = try Connection(path: path)
        defer { c.close() }
        try c.execute(Migrator.version1)
        try c.execute("PRAGMA user_version=1")
        try c.execute(Naming.classTableDDL("_User"))
        try c.execute(Naming.classTableDDL("_Session"))
        try c.execute("INSERT INTO _mb_schema(className) VALUES ('_User'), ('_Session')")
        let email1 = "ann@example.com", email2 = duplicateEmails ? "ANN@example.com" : "bob@example.com"
        try c.execute("""
            INSERT INTO "_User"(objectId, createdAt, updatedAt, data) VALUES
              ('u1', 1, 1, '{"username":"ann","email":"\(email1)"}'),
              ('u2', 2, 2, '{"username":"bob","email":"\(email2)"}');
            """)
        guard !duplicateEmails else { return }
        try c.execute("""
            CREATE UNIQUE INDEX IF NOT EXISTS "_User__auth_email" ON "_User"(lower(json_extract(data,'$.email')));
            CREATE TABLE IF NOT EXISTS _mb_auth_epoch(id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL);
            CREATE TABLE IF NOT EXISTS _mb_login_failures(key TEXT PRIMARY KEY, start INTEGER NOT NULL,
              failures INTEGER NOT NULL);
            INSERT OR IGNORE INTO _mb_auth_epoch(id, n) VALUES (1, 7);
            INSERT INTO _mb_login_failures VALUES ('ip:10.0.0.1', 5000, 3);
            CREATE TRIGGER IF NOT EXISTS "_User__auth_epoch_u" AFTER UPDATE ON "_User" BEGIN
              UPDATE _mb_auth_epoch SET n = n + 1 WHERE id = 1;
            END;
            CREATE TABLE IF NOT EXISTS _mb_changes(
              seq INTEGER PRIMARY KEY AUTOINCREMENT,
              cls TEXT NOT NULL, oid TEXT NOT NULL, op TEXT NOT NULL,
              at INTEGER NOT NULL, perm TEXT);
            CREATE TABLE IF NOT EXISTS _mb_changes_meta(k TEXT PRIMARY KEY, v INTEGER NOT NULL);
            INSERT INTO _mb_changes(cls, oid, op, at) VALUES ('_User', 'u1', 'save', 1);
            CREATE TABLE IF NOT EXISTS _mb_usage (
              hour INTEGER NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
              units INTEGER NOT NULL DEFAULT 0, refused INTEGER NOT NULL DEFAULT 0,
              db_reads INTEGER NOT NULL DEFAULT 0, db_writes INTEGER NOT NULL DEFAULT 0,
              lua_cpu_us INTEGER NOT NULL DEFAULT 0, wall_us INTEGER NOT NULL DEFAULT 0,
              bytes_in INTEGER NOT NULL DEFAULT 0, bytes_out INTEGER NOT NULL DEFAULT 0,
              PRIMARY KEY (kind, key, hour)
            ) WITHOUT ROWID;
            INSERT INTO _mb_usage(hour, kind, key, units) VALUES (3600000, 'account', 'app', 42);
            CREATE TABLE IF NOT EXISTS _mb_files(name TEXT PRIMARY KEY, contentType TEXT NOT NULL,
              size INTEGER NOT NULL, createdAt INTEGER NOT NULL);
            INSERT INTO _mb_files VALUES ('0123456789abcdef0123456789abcdef_a.txt', 'text/plain', 3, 1);
            CREATE TABLE IF NOT EXISTS _mb_config(name TEXT PRIMARY KEY, value TEXT NOT NULL,
              masterKeyOnly INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
            INSERT INTO _mb_config VALUES ('limit', '10', 1);
            """)
    }

    @Test func previousReleaseDatabaseOpensAndUpgrades() throws {
        try writePreviousReleaseDatabase()
        let store = try SQLiteDocumentStore(path: path)
        let c = try Connection(path: path)
        defer { c.close() }
        #expect(try version(c) == Migrator.currentVersion)
        let all = try names(c)
        for name in Self.internalTables + Self.internalIndexesAndTriggers {
            #expect(all.contains(name), "\(name) missing after the upgrade")
        }
        // Every old row is still there and readable through the store.
        #expect(try store.authEpoch() == 7)
        #expect(try store.loginFailureWindows(closedAtOrBefore: 0) == [LoginFailureWindow(key: "ip:10.0.0.1", start: 5000, failures: 3)])
        #expect(try store.user(email: "ANN@example.com")?.objectId == "u1")
        #expect(try store.fileContentType("0123456789abcdef0123456789abcdef_a.txt") == "text/plain")
        #expect(try store.configParameters() == [ConfigParameter(name: "limit", value: 10, masterKeyOnly: true)])
        let report = try store.usageReport(from: 0, to: 7_200_000, by: .account)
        #expect(report.rows.map(\.key) == ["app"] && report.rows.first?.units == 42 && report.rows.first?.events == 0)
        // The new column and the new tables take writes.
        try store.write(UsageBatch(rows: [UsageRow(bucket: UsageBucket(kind: .account, key: "app", hour: 3_600_000),
                                                   counts: UsageCounts(units: 1, events: 2))],
                                   windows: [], pruneWindowsBefore: 0))
        #expect(try store.usageReport(from: 0, to: 7_200_000, by: .account).rows.first?.events == 2)
        try store.saveMailToken(hash: "h", userId: "u1", kind: "verifyEmail", email: "ann@example.com", expiresAt: 9, now: 1)
        #expect(try store.mailTokenExpiry(hash: "h", kind: "verifyEmail") == 9)
        // The triggers the upgrade added: deleting a user takes their sessions with it.
        try store.prepareAccounts()
        _ = try store.insert("_Session", fields: ["user": ["__type": "Pointer", "className": "_User", "objectId": "u2"]],
                             acl: nil, identity: .master)
        try store.delete("_User", objectId: "u2", identity: .master)
        #expect(try store.deleteSessions(userId: "u2", except: nil) == 0)
        #expect(try store.authEpoch() > 7)
        store.database.close()

        // Opening again is a no-op.
        let again = try SQLiteDocumentStore(path: path)
        #expect(try again.configParameters().count == 1)
        again.database.close()
    }

    /// A database the migrator left at `version` (2, 3 or 4), with a `Note` class table and the
    /// rows `setup` writes: version 2 indexed every change-feed row by (class, objectId),
    /// version 3 only the saves, version 4 the saves by (class, rid).
    func writeDatabase(atVersion version: Int64, _ setup: String) throws {
        let c = try Connection(path: path)
        defer { c.close() }
        try c.execute(Migrator.version1)
        try Migrator.upgradeToVersion2(c)
        try c.execute(version >= 3 ? Migrator.version3 : "DROP INDEX _mb_changes_obj; CREATE INDEX _mb_changes_obj ON _mb_changes(cls, oid)")
        if version >= 4 { try Migrator.upgradeToVersion4(c) }
        try c.execute("PRAGMA user_version=\(version)")
        try c.execute(Naming.classTableDDL("Note"))
        try c.execute(setup)
    }

    /// Version 2 indexed every change feed row by object; version 3 keeps only saves in that
    /// index, and the rows written before read as before.
    @Test func version2ChangeFeedIndexBecomesSavesOnly() throws {
        try writeDatabase(atVersion: 2, """
            INSERT INTO "Note"(objectId, createdAt, updatedAt, data) VALUES ('n2', 1, 1, '{}');
            INSERT INTO _mb_changes(cls, oid, op, at) VALUES ('Note', 'n1', 'save', 1), ('Note', 'n2', 'save', 1),
              ('Note', 'n1', 'delete', 2);
            """)
        let store = try SQLiteDocumentStore(path: path)
        let c = try Connection(path: path)
        defer { c.close() }
        #expect(try version(c) == Migrator.currentVersion)
        var sql = ""
        if case .text(let t)? = try c.scalar("SELECT sql FROM sqlite_master WHERE name = '_mb_changes_obj'") { sql = t }
        #expect(sql.contains("WHERE op = 'save'"))
        let rows = try store.changeFeed("Note", after: 0, through: 10, limit: 10)
        #expect(rows.map(\.objectId) == ["n2", "n1"] && rows.map(\.op) == [.save, .delete])
        store.database.close()
    }

    /// Version 3 indexed saves by (class, objectId); version 4 gives every save of a live object
    /// its row id and indexes (class, rid). Rows not compacted yet are compacted under the old
    /// index first; reads, compaction and new writes go on as before.
    @Test func version3ChangeFeedRowsGetTheirObjectsRowIds() throws {
        // n1: created and updated (not compacted yet); n2: created; n3: created and deleted.
        try writeDatabase(atVersion: 3, """
            INSERT INTO _mb_schema(className, fields) VALUES ('Note', '{"v":{"type":"Number"}}');
            INSERT INTO "Note"(objectId, createdAt, updatedAt, data) VALUES ('n1', 1, 2, '{"v":2}'), ('n2', 1, 1, '{"v":1}');
            INSERT INTO _mb_changes(cls, oid, op, at) VALUES ('Note', 'n1', 'save', 1), ('Note', 'n2', 'save', 1),
              ('Note', 'n3', 'save', 1), ('Note', 'n1', 'save', 2), ('Note', 'n3', 'delete', 3);
            """)
        let store = try SQLiteDocumentStore(path: path)
        let c = try Connection(path: path)
        defer { c.close() }
        #expect(try version(c) == Migrator.currentVersion)
        var sql = ""
        if case .text(let t)? = try c.scalar("SELECT sql FROM sqlite_master WHERE name = '_mb_changes_obj'") { sql = t }
        #expect(sql.contains("(cls, rid)") && sql.contains("WHERE op = 'save'"), "\(sql)")
        // The superseded saves (n1's first, n3's) are gone; the live saves carry their rids.
        var left: [String] = []
        try c.query("SELECT seq, oid, op, ifnull(rid, 0) FROM _mb_changes ORDER BY seq") { s in
            left.append("\(s.int64(0)) \(s.text(1) ?? "") \(s.text(2) ?? "") \(s.int64(3))")
        }
        #expect(left == ["2 n2 save 2", "4 n1 save 1", "5 n3 delete 0"])
        let rows = try store.changeFeed("Note", after: 0, through: 10, limit: 10)
        #expect(rows.map(\.objectId) == ["n2", "n1", "n3"] && rows.map(\.op) == [.save, .save, .delete])
        // New writes find the old rows by rid: an update supersedes n2's migrated save.
        _ = try store.update("Note", objectId: "n2", changes: ["v": 5], identity: .master)
        #expect(try store.compactChangeFeed(batch: 100) == 1)
        var n2: [Int64] = []
        try c.query("SELECT seq FROM _mb_changes WHERE oid = 'n2'") { s in n2.append(s.int64(0)) }
        #expect(n2 == [6])
        store.database.close()
    }

    /// Version 4 kept a GeoPoint field's R*Tree by an insert trigger too; version 5 drops it
    /// (creates write their R*Tree rows themselves). Points written before are still found, a
    /// create after the upgrade is found, updates and deletes still follow by trigger.
    @Test func version4GeoInsertTriggersAreDropped() throws {
        try writeDatabase(atVersion: 4, """
            INSERT INTO _mb_schema(className, fields) VALUES ('Place', '{"loc":{"type":"GeoPoint"}}');
            \(Naming.classTableDDL("Place"))
            \(Naming.geoDDL("Place", "loc"))
            CREATE TRIGGER "Place__geo__loc__ai" AFTER INSERT ON "Place" BEGIN
              INSERT INTO "Place__geo__loc"(id, minLat, maxLat, minLng, maxLng) SELECT id, la, la, ln, ln FROM (SELECT new.rid AS id, la, ln FROM (SELECT json_extract(new.data,'$.loc.latitude') AS la, json_extract(new.data,'$.loc.longitude') AS ln) WHERE la IS NOT NULL AND ln IS NOT NULL);
            END;
            INSERT INTO "Place"(objectId, createdAt, updatedAt, data) VALUES ('p1', 1, 1, '{"loc":{"__type":"GeoPoint","latitude":10.5,"longitude":20.5}}');
            """)
        let store = try SQLiteDocumentStore(path: path)
        let c = try Connection(path: path)
        defer { c.close() }
        #expect(try version(c) == 5)
        let triggers = try names(c).filter { $0.hasPrefix("Place__geo__loc__") }.sorted()
        #expect(triggers == ["Place__geo__loc__ad", "Place__geo__loc__au"])
        func inBox() throws -> [String] {
            let w: JSONValue = ["loc": ["$within": ["$box": [["__type": "GeoPoint", "latitude": 10, "longitude": 20],
                                                             ["__type": "GeoPoint", "latitude": 11, "longitude": 21]]]]]
            let r = try store.find(FindQuery(className: "Place", where: w, limit: 100, keys: ["objectId"]), identity: .master)
            return try r.objects().compactMap { $0["objectId"]?.stringValue }.sorted()
        }
        func rtreeRows() throws -> Int64 {
            if case .integer(let n)? = try c.scalar("SELECT count(*) FROM \"Place__geo__loc\"") { return n }
            return -1
        }
        #expect(try inBox() == ["p1"])
        let p2 = try store.insert("Place", fields: ["loc": ["__type": "GeoPoint", "latitude": 10.25, "longitude": 20.75]],
                                  acl: nil, identity: .master).objectId
        _ = try store.insert("Place", fields: ["loc": ["__type": "GeoPoint", "latitude": 50, "longitude": 20.75]],
                             acl: nil, identity: .master)
        _ = try store.insert("Place", fields: ["name": "nowhere"], acl: nil, identity: .master)
        #expect(try inBox() == ["p1", p2].sorted())
        #expect(try rtreeRows() == 3)
        _ = try store.update("Place", objectId: p2, changes: ["loc": ["__type": "GeoPoint", "latitude": 60, "longitude": 20.75]],
                             identity: .master)
        #expect(try inBox() == ["p1"])
        try store.delete("Place", objectId: "p1", identity: .master)
        #expect(try inBox() == [])
        #expect(try rtreeRows() == 2)
        store.database.close()
    }

    @Test func aFailedUpgradeChangesNothing() throws {
        // Two emails equal but for case: the unique index of version 2 refuses them.
        try writePreviousReleaseDatabase(duplicateEmails: true)
        #expect(throws: ParseError.self) { _ = try SQLiteDocumentStore(path: path) }
        let c = try Connection(path: path)
        defer { c.close() }
        #expect(try version(c) == 1)
        let all = try names(c)
        #expect(!all.contains("_mb_files") && !all.contains("_mb_usage") && !all.contains("_User__auth_email"))
    }
}
