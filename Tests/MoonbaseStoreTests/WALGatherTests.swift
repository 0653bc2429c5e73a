import Foundation
import MoonbaseCore
import MoonbaseSQLite
import Testing

/// The `moonbase` VFS gathers a transaction's WAL frames and writes them at commit
/// (`Sources/CSQLiteWAL/mb_walbuf.c`). These tests hold it to its two promises: far fewer writes
/// than frames, and a file that every other connection (and a later open) reads exactly as if
/// each frame had been written at once.
@Suite(.timeLimit(.minutes(1)))
struct WALGatherTests {
    let f: StorageFixture
    init() throws {
        f = try StorageFixture()
        try f.database.write { (tx) throws(ParseError) in
            try tx.connection.execute("CREATE TABLE w(id INTEGER PRIMARY KEY, tag TEXT, body BLOB)")
        }
    }

    /// `rows` rows of `bytes` random bytes each, tagged, in the current transaction.
    static func fill(_ c: Connection, _ tag: String, rows: Int, bytes: Int) throws(ParseError) {
        try c.run("""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
            INSERT INTO w(tag, body) SELECT ?, randomblob(?) FROM n
            """, [.integer(Int64(rows)), .text(tag), .integer(Int64(bytes))])
    }

    func count(_ tag: String? = nil) throws -> Int64 {
        try f.database.read { (c) throws(ParseError) -> Int64 in
            let v = tag == nil ? try c.scalar("SELECT count(*) FROM w") : try c.scalar("SELECT count(*) FROM w WHERE tag = ?", [.text(tag!)])
            if case .integer(let n)? = v { return n }
            return -1
        }
    }

    func writerStats() throws -> WALGather.Stats? {
        try f.database.write { (tx) throws(ParseError) in tx.connection.walGatherStats }
    }

    @Test func aCommitsFramesReachTheFileInAFewWrites() throws {
        let before = try #require(try writerStats(), "the writer's WAL does not go through the gathering VFS")
        try f.database.write { (tx) throws(ParseError) in try Self.fill(tx.connection, "a", rows: 200, bytes: 2000) }
        let after = try #require(try writerStats())
        let frames = after.frames - before.frames
        let writes = after.writes - before.writes
        #expect(frames >= 100, "about one page per row: \(frames) frames")
        // Two system calls per frame without the VFS; pieces of 124 KiB (30 frames) with it.
        #expect(writes * 20 <= frames * 2, "\(writes) writes for \(frames) frames")
        #expect(try count("a") == 200)
    }

    /// Each commit is in the file before SQLite publishes it: a read on another connection right
    /// after each commit sees it, for small commits and for ones larger than the buffer.
    @Test func everyCommitIsSeenByOtherConnectionsAtOnce() throws {
        let db = f.database
        for i in 1...120 {
            let big = i % 30 == 0
            try db.write { (tx) throws(ParseError) in
                try Self.fill(tx.connection, "c\(i)", rows: big ? 300 : 1, bytes: big ? 3000 : 100)
            }
            let seen = LockedBox<Int64>(-1)
            runConcurrently(1) { _ in
                let v = try? db.read { (c) throws(ParseError) in try c.scalar("SELECT count(*) FROM w WHERE tag = ?", [.text("c\(i)")]) }
                if case .integer(let n)? = v { seen.set(n) }
            }
            #expect(seen.get() == (big ? 300 : 1), "commit \(i)")
        }
    }

    /// A transaction that spills frames into the WAL and then rolls back, checkpoints that reset
    /// the WAL, and commits around them leave a file that a fresh open reads whole and sound.
    @Test func rollbacksSpillsAndCheckpointsLeaveASoundFile() throws {
        let db = f.database
        try db.write { (tx) throws(ParseError) in try Self.fill(tx.connection, "before", rows: 50, bytes: 500) }
        let code = parseCode {
            try db.write { (tx) throws(ParseError) in
                // Past the writer's 8 MiB page cache, so SQLite spills frames before the commit.
                try tx.connection.execute("PRAGMA cache_size=-1024")
                try Self.fill(tx.connection, "doomed", rows: 3000, bytes: 3000)
                throw ParseError(.validationError, "roll back")
            }
        }
        #expect(code == 142)
        try db.write { (tx) throws(ParseError) in try tx.connection.execute("PRAGMA cache_size=-8192") }
        try db.write { (tx) throws(ParseError) in try Self.fill(tx.connection, "after", rows: 50, bytes: 500) }
        try db.checkpoint()   // TRUNCATE: the next commit writes a new WAL header
        try db.write { (tx) throws(ParseError) in try Self.fill(tx.connection, "restarted", rows: 400, bytes: 1500) }
        try db.write { (tx) throws(ParseError) in try Self.fill(tx.connection, "last", rows: 1, bytes: 10) }
        #expect(try count("doomed") == 0)

        // A new connection reads the files as they are on disk (the WAL is not checkpointed).
        let fresh = try Connection(path: db.path)
        defer { fresh.close() }
        #expect(try fresh.scalar("PRAGMA integrity_check") == .text("ok"))
        #expect(try fresh.scalar("SELECT count(*) FROM w") == .integer(501))
        #expect(try fresh.scalar("SELECT count(*) FROM w WHERE tag = 'restarted'") == .integer(400))
        #expect(try fresh.scalar("SELECT count(*) FROM w WHERE tag = 'doomed'") == .integer(0))
    }

    // MARK: sub-journals in memory

    /// Rows of `w` whose body differs from the copy taken by `snapshot()` (missing rows count).
    func changedSinceSnapshot() throws -> Int64 {
        try f.database.read { (c) throws(ParseError) -> Int64 in
            let v = try c.scalar("""
                SELECT (SELECT count(*) FROM w_copy) - (SELECT count(*) FROM w JOIN w_copy USING(id) WHERE w.body = w_copy.body)
                     + (SELECT count(*) FROM w) - (SELECT count(*) FROM w_copy)
                """)
            if case .integer(let n)? = v { return n }
            return -1
        }
    }

    func snapshot() throws {
        try f.database.write { (tx) throws(ParseError) in
            try tx.connection.execute("DROP TABLE IF EXISTS w_copy; CREATE TABLE w_copy AS SELECT id, body FROM w")
        }
    }

    /// A savepoint that changed far more than SQLite's first 64 KiB of journal (so the copies
    /// went to the VFS's in-memory file) and rolled back leaves every page as it was, and the
    /// transaction around it commits what it did before and after.
    @Test func aSavepointRolledBackRestoresEveryPageItCopied() throws {
        try f.database.write { (tx) throws(ParseError) in try Self.fill(tx.connection, "kept", rows: 1500, bytes: 900) }
        try snapshot()
        let before = WALGather.stats
        let code = parseCode {
            try f.database.write { (tx) throws(ParseError) in
                try Self.fill(tx.connection, "first", rows: 10, bytes: 100)
                let inner = parseCode {
                    try f.database.write { (tx) throws(ParseError) in   // nested: a savepoint
                        try tx.connection.run("UPDATE w SET body = randomblob(900) WHERE tag = 'kept'")
                        try Self.fill(tx.connection, "undone", rows: 300, bytes: 900)
                        throw ParseError(.validationError, "undo the part")
                    }
                }
                #expect(inner == 142)
                try Self.fill(tx.connection, "second", rows: 10, bytes: 100)
                throw ParseError(.scriptFailed, "roll back the whole transaction")
            }
        }
        #expect(code == 141)
        #expect(try changedSinceSnapshot() == 0)

        // The same nested rollback, this time inside a transaction that commits.
        try f.database.write { (tx) throws(ParseError) in
            try Self.fill(tx.connection, "first", rows: 10, bytes: 100)
            _ = parseCode {
                try f.database.write { (tx) throws(ParseError) in
                    try tx.connection.run("UPDATE w SET body = randomblob(900) WHERE tag = 'kept'")
                    throw ParseError(.validationError, "undo the part")
                }
            }
            try Self.fill(tx.connection, "second", rows: 10, bytes: 100)
        }
        let after = WALGather.stats
        #expect(try count("first") == 10)
        #expect(try count("second") == 10)
        #expect(try count("undone") == 0)
        #expect(try count("kept") == 1500)
        try f.database.write { (tx) throws(ParseError) in try tx.connection.execute("DELETE FROM w WHERE tag IN ('first', 'second')") }
        #expect(try changedSinceSnapshot() == 0)
        #expect(try f.database.read { (c) throws(ParseError) in try c.scalar("PRAGMA integrity_check") } == .text("ok"))
        // Other tests run beside this one, so the counters only say "at least": each rollback
        // copied some 400 pages (1.6 MB), far past the 64 KiB SQLite keeps in its own memory.
        #expect(after.subjournals > before.subjournals, "no sub-journal went through the VFS")
        #expect(after.subjournalBytes - before.subjournalBytes >= 2 * 1_000_000, "\(after.subjournalBytes - before.subjournalBytes) bytes")
    }

    /// A statement that fails after changing many rows (here on a unique constraint at row
    /// 1,400 of 1,500) is undone alone through its statement journal; the transaction goes on.
    @Test func aStatementThatFailsHalfwayIsUndoneAlone() throws {
        try f.database.write { (tx) throws(ParseError) in
            try tx.connection.execute("CREATE TABLE IF NOT EXISTS u(id INTEGER PRIMARY KEY, k INTEGER UNIQUE, body BLOB)")
            try tx.connection.run("""
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1500)
                INSERT INTO u(id, k, body) SELECT i, i, randomblob(900) FROM n
                """)
            try tx.connection.execute("DROP TABLE IF EXISTS u_copy; CREATE TABLE u_copy AS SELECT id, k, body FROM u")
        }
        try f.database.write { (tx) throws(ParseError) in
            let code = parseCode {
                try tx.connection.run("UPDATE u SET body = randomblob(900), k = CASE WHEN id = 1400 THEN 1 ELSE k END")
            }
            #expect(code != nil, "the UPDATE was meant to fail on the unique k")
            try tx.connection.run("INSERT INTO u(id, k, body) VALUES (5000, 5000, x'00')")
        }
        let same = try f.database.read { (c) throws(ParseError) in
            try c.scalar("SELECT count(*) FROM u JOIN u_copy USING(id) WHERE u.k = u_copy.k AND u.body = u_copy.body")
        }
        #expect(same == .integer(1500))
        #expect(try f.database.read { (c) throws(ParseError) in try c.scalar("SELECT count(*) FROM u") } == .integer(1501))
    }
}
