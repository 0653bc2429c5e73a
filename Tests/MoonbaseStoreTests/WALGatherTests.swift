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
}
