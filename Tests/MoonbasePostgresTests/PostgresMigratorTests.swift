import Foundation
import MoonbaseCore
import MoonbasePostgres
import MoonbaseStore
import Testing

extension PostgresSuite {
    @Suite struct PostgresMigratorTests {
        static let internalTables = [
            "_mb_migrations", "_mb_schema", "_mb_request_ids", "_mb_changes", "_mb_changes_meta", "_mb_usage",
            "_mb_usage_window", "_mb_auth_epoch", "_mb_login_failures", "_mb_files", "_mb_config", "_mb_email_tokens",
        ]

        /// A pool on a new, empty database of the cluster.
        func freshDatabase() throws -> PGPool {
            let name = uniqueTable("mbdb")
            let admin = try PGConnection(url: PGTestCluster.url)
            try admin.executeScript("CREATE DATABASE \(name)")
            let base = PGTestCluster.url
            let url = String(base[..<base.lastIndex(of: "/")!]) + "/" + name
            return try PGPool(url: url)
        }

        @Test func migratingTwiceChangesNothingTheSecondTime() throws {
            let pool = try freshDatabase()
            defer { pool.close() }
            #expect(try PostgresMigrator.version(pool) == 0)
            #expect(try PostgresMigrator.migrate(pool) == PostgresMigrator.currentVersion)
            let firstApplied = try pool.withConnection { (c) throws(ParseError) in
                try c.execute("SELECT version, appliedAt FROM _mb_migrations ORDER BY version").rows.map { $0.values }
            }
            #expect(try PostgresMigrator.migrate(pool) == PostgresMigrator.currentVersion)
            #expect(try PostgresMigrator.version(pool) == PostgresMigrator.currentVersion)
            try pool.withConnection { (c) throws(ParseError) in
                #expect(try c.execute("SELECT version, appliedAt FROM _mb_migrations ORDER BY version").rows.map { $0.values } == firstApplied)
                for t in Self.internalTables {
                    #expect(try c.execute("SELECT to_regclass($1) IS NOT NULL", [.text(t)]).scalar == .bool(true), "\(t)")
                }
                // The auth epoch's single row is made once.
                #expect(try c.execute("SELECT count(*), max(n) FROM _mb_auth_epoch").rows.first?.values == [.integer(1), .integer(0)])
                // The change feed numbers rows from its sequence.
                for oid in ["a", "b"] {
                    try c.execute("INSERT INTO _mb_changes(cls, oid, op, at) VALUES ('Post', $1, 'insert', 1)", [.text(oid)])
                }
                let seqs = try c.execute("SELECT seq FROM _mb_changes ORDER BY seq").rows.map { $0[0] }
                #expect(seqs == [.integer(1), .integer(2)])
                #expect(try c.execute("SELECT pg_get_serial_sequence('_mb_changes', 'seq')").scalar == .text("public._mb_changes_seq"))
                let idx = try c.execute("SELECT indexname FROM pg_indexes WHERE tablename = '_mb_changes' ORDER BY indexname").rows.map { $0[0] }
                #expect(idx == [.text("_mb_changes_cls_seq"), .text("_mb_changes_obj"), .text("_mb_changes_pkey"), .text("_mb_changes_tomb")])
            }
        }

        @Test func tablesMadeBeforeTheVersionTableUpgrade() throws {
            let pool = try freshDatabase()
            defer { pool.close() }
            try pool.withConnection { (c) throws(ParseError) in
                try c.executeScript("CREATE TABLE _mb_config(name text PRIMARY KEY, value text NOT NULL, masterKeyOnly boolean NOT NULL DEFAULT false)")
                try c.execute("INSERT INTO _mb_config VALUES ('k', 'v', true)")
            }
            #expect(try PostgresMigrator.migrate(pool) == PostgresMigrator.currentVersion)
            #expect(try pool.withConnection { (c) throws(ParseError) in try c.execute("SELECT value FROM _mb_config").scalar } == .text("v"))
        }

        @Test func hostsStartingTogetherMigrateOnce() throws {
            let pool = try freshDatabase()
            defer { pool.close() }
            let results = Locked<[String]>([])
            let url = pool.url
            let hosts = (0..<3).map { (_: Int) -> DispatchGroup in
                onThread {
                    do {
                        let own = try PGPool(url: url)
                        defer { own.close() }
                        let v = try PostgresMigrator.migrate(own)
                        results.update { $0.append("v\(v)") }
                    } catch {
                        results.update { $0.append("\(error)") }
                    }
                }
            }
            for h in hosts { #expect(h.wait(timeout: .now() + .seconds(60)) == .success) }
            #expect(results.get == Array(repeating: "v\(PostgresMigrator.currentVersion)", count: 3))
            let rows = try pool.withConnection { (c) throws(ParseError) in try c.execute("SELECT count(*) FROM _mb_migrations").scalar }
            #expect(rows == .integer(Int64(PostgresMigrator.currentVersion)))
        }

        @Test func classTablesAreMadeOnceWithTheirIndexes() throws {
            let pool = try freshDatabase()
            defer { pool.close() }
            let url = pool.url
            let errors = Locked<[String]>([])
            let writers = (0..<4).map { (_: Int) -> DispatchGroup in
                onThread {
                    do {
                        let own = try PGPool(url: url)
                        defer { own.close() }
                        try PostgresLayout.ensureClassTable("GameScore", pool: own)
                    } catch {
                        errors.update { $0.append("\(error)") }
                    }
                }
            }
            for w in writers { #expect(w.wait(timeout: .now() + .seconds(60)) == .success) }
            #expect(errors.get == [])
            try PostgresLayout.ensureClassTable("GameScore", pool: pool)
            try pool.withConnection { (c) throws(ParseError) in
                let idx = try c.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'GameScore' ORDER BY indexname").rows.map { $0[0] }
                #expect(idx == [.text("GameScore__createdAt"), .text("GameScore__updatedAt"), .text("GameScore_pkey")])
                let doc = PGValue.json(Array(#"{"score": 1337, "cheatMode": false}"#.utf8))
                try c.execute("""
                    INSERT INTO "GameScore"(objectId, createdAt, updatedAt, rperm, data) VALUES ($1, $2, $2, $3::text[], $4)
                    """, [.text("abc1234567"), .integer(1_767_225_600_000), .text("{*,u1}"), doc])
                let dup = #expect(throws: ParseError.self) {
                    try c.execute(#"INSERT INTO "GameScore"(objectId, createdAt, updatedAt) VALUES ($1, 1, 1)"#, [.text("abc1234567")])
                }
                #expect(dup?.code == .duplicateValue)
                // Unquoted column names: the SQLite spelling names the same columns.
                let r = try c.execute(#"SELECT objectId, (data->>'score')::int8 FROM "GameScore" WHERE rperm && $1::text[]"#, [.text("{u1}")])
                #expect(r.rows.first?.values == [.text("abc1234567"), .integer(1337)])
            }
            for bad in ["", "1x", "a__b", "Robert\"); DROP TABLE _mb_schema; --"] {
                let e = #expect(throws: ParseError.self) { try PostgresLayout.ensureClassTable(bad, pool: pool) }
                #expect(e?.code == .invalidClassName)
            }
        }
    }
}
