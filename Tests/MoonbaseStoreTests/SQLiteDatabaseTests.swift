import Foundation
import MoonbaseCore
@testable import MoonbaseSQLite
import MoonbaseStore
import Testing

@Suite(.timeLimit(.minutes(1)))
struct SQLiteDatabaseTests {
    let f: StorageFixture
    init() throws {
        f = try StorageFixture()
        try f.database.write { (tx) throws(ParseError) in
            try tx.connection.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT UNIQUE, n INTEGER DEFAULT 0)")
        }
    }

    func count(_ sql: String = "SELECT count(*) FROM t") throws -> Int64 {
        try f.database.read { (c) throws(ParseError) -> Int64 in
            if case .integer(let n)? = try c.scalar(sql) { return n }
            return -1
        }
    }

    @Test func pragmasAreApplied() throws {
        let mode = try f.database.read { (c) throws(ParseError) in try c.scalar("PRAGMA journal_mode") }
        #expect(mode == .text("wal"))
        let fk = try f.database.read { (c) throws(ParseError) in try c.scalar("PRAGMA foreign_keys") }
        #expect(fk == .integer(1))
        let cache = try f.database.read { (c) throws(ParseError) in try c.scalar("PRAGMA cache_size") }
        #expect(cache == .integer(-4096))
        let sd = try f.database.read { (c) throws(ParseError) in try c.scalar("PRAGMA secure_delete") }
        #expect(sd == .integer(0))
        // Files up to the library's limit are read through the map (a page past it is a copy):
        // the 2 GiB asked for is clamped to the build's limit, never left at 128 MiB or off.
        let mmap = try f.database.read { (c) throws(ParseError) in try c.scalar("PRAGMA mmap_size") }
        guard case .integer(let bytes) = mmap else { Issue.record("mmap_size: \(mmap)"); return }
        #expect(bytes >= 1 << 30 && bytes <= 2 << 30)
    }

    @Test func writeCommitsAndErrorRollsBack() throws {
        try f.database.write { (tx) throws(ParseError) in try tx.connection.run("INSERT INTO t(v) VALUES('a')") }
        #expect(try count() == 1)
        let code = parseCode {
            try f.database.write { (tx) throws(ParseError) in
                try tx.connection.run("INSERT INTO t(v) VALUES('b')")
                throw ParseError(.validationError, "no")
            }
        }
        #expect(code == 142)
        #expect(try count() == 1)
    }

    @Test func nestedWriteJoinsAndItsFailureIsContained() throws {
        try f.database.write { (tx) throws(ParseError) in
            try tx.connection.run("INSERT INTO t(v) VALUES('outer')")
            // A nested write on the same thread joins (no deadlock) and sees the outer row.
            try f.database.write { (inner) throws(ParseError) in
                #expect(inner === tx)
                try inner.connection.run("INSERT INTO t(v) VALUES('inner')")
            }
            // A failing nested write rolls back only its own part when the caller catches it.
            let code = parseCode {
                try f.database.write { (inner) throws(ParseError) in
                    try inner.connection.run("INSERT INTO t(v) VALUES('doomed')")
                    try inner.connection.run("INSERT INTO t(v) VALUES('outer')")  // unique violation
                }
            }
            #expect(code == 137)
            // Reads inside the transaction use the writer and see its rows.
            let seen = try f.database.read { (c) throws(ParseError) in try c.scalar("SELECT count(*) FROM t") }
            #expect(seen == .integer(2))
        }
        #expect(try count("SELECT count(*) FROM t WHERE v IN ('outer','inner')") == 2)
        #expect(try count("SELECT count(*) FROM t WHERE v = 'doomed'") == 0)
    }

    @Test func outerErrorRollsBackNestedWork() throws {
        _ = parseCode {
            try f.database.write { (tx) throws(ParseError) in
                try f.database.write { (inner) throws(ParseError) in try inner.connection.run("INSERT INTO t(v) VALUES('x')") }
                throw ParseError(.scriptFailed, "boom")
            }
        }
        #expect(try count() == 0)
    }

    @Test func otherThreadsDoNotSeeUncommittedWrites() throws {
        try f.database.write { (tx) throws(ParseError) in
            try tx.connection.run("INSERT INTO t(v) VALUES('pending')")
            let db = f.database
            let seen = LockedBox<Int64>(-1)
            runConcurrently(1) { _ in
                let v = try? db.read { (c) throws(ParseError) in try c.scalar("SELECT count(*) FROM t") }
                if case .integer(let n)? = v { seen.set(n) }
            }
            #expect(seen.get() == 0)
        }
        #expect(try count() == 1)
    }

    /// Held reads share one read transaction, yet every read sees each write committed before
    /// it: this thread's own (the held transaction ends first) and other threads' (a commit
    /// makes the next held read take a fresh snapshot).
    @Test func heldReadsShareATransactionAndStillSeeEveryCommit() throws {
        let db = f.database
        func autocommit() throws -> Bool { try db.read { (c) throws(ParseError) -> Bool in c.isAutocommit } }
        db.holdReads()
        #expect(try count() == 0)
        #expect(try autocommit() == false)   // the transaction stays open between reads
        #expect(try count() == 0)
        // Another thread commits: the next read here sees it.
        runConcurrently(1) { _ in
            _ = try? db.write { (tx) throws(ParseError) in try tx.connection.run("INSERT INTO t(v) VALUES('other')") }
        }
        #expect(try count() == 1)
        // This thread writes: the read after it sees it.
        try db.write { (tx) throws(ParseError) in try tx.connection.run("INSERT INTO t(v) VALUES('mine')") }
        #expect(try count() == 2)
        db.releaseReads()
        #expect(try autocommit() == true)
        #expect(try count() == 2)
        db.releaseReads()   // idempotent
    }

    /// A read attempted on an I/O thread under a budget (`InlineAttempt`): a statement that
    /// runs past it is interrupted and the attempt is marked expired (its answer is not used);
    /// one within it answers as usual; a write inside a read attempt is refused before it
    /// starts, so an attempt that is run again never wrote. Off attempts nothing changes.
    @Test func readAttemptsStopAtTheirBudgetAndNeverWrite() throws {
        let db = f.database
        // About 10^6 VM steps: far past 1 µs, well within any test's time.
        let slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) SELECT count(*) FROM c"
        let quick = InlineAttempt.running(readBudgetNanos: 50_000_000) { () -> (Int64?, Bool) in
            let n = try? db.read { (c) throws(ParseError) -> Int64? in
                if case .integer(let n)? = try c.scalar("SELECT count(*) FROM t") { return n }
                return nil
            }
            return (n ?? nil, InlineAttempt.expired)
        }
        #expect(quick.0 == 0 && quick.1 == false)
        let cut = InlineAttempt.running(readBudgetNanos: 1_000) { () -> (Bool, Bool) in
            let failed = (try? db.read { (c) throws(ParseError) in try c.scalar(slow) }) == nil
            return (failed, InlineAttempt.expired)
        }
        #expect(cut.0 && cut.1)
        let refused = InlineAttempt.running(readBudgetNanos: 50_000_000) { () -> Bool in
            do throws(ParseError) {
                try db.write { (tx) throws(ParseError) in try tx.connection.run("INSERT INTO t(v) VALUES('from a read')") }
                return false
            } catch {
                return InlineAttempt.isContinuesOnWorker(error)
            }
        }
        #expect(refused)
        #expect(try count() == 0)
        // Outside an attempt the same statement runs to the end on the same connection.
        let full = try db.read { (c) throws(ParseError) in try c.scalar(slow) }
        #expect(full == .integer(300000))
        #expect(InlineAttempt.expired == false)
    }

    @Test func concurrentWritersAreSerialised() throws {
        try f.database.write { (tx) throws(ParseError) in try tx.connection.run("INSERT INTO t(id, v) VALUES(1, 'c')") }
        let db = f.database
        let errors = LockedBox(0)
        runConcurrently(4) { _ in
            for _ in 0..<100 {
                do {
                    try db.write { (tx) throws(ParseError) in
                        // read-modify-write is safe inside one serialised transaction
                        guard case .integer(let n)? = try tx.connection.scalar("SELECT n FROM t WHERE id = 1") else { return }
                        try tx.connection.run("UPDATE t SET n = ? WHERE id = 1", [.integer(n + 1)])
                    }
                } catch {
                    errors.update { $0 += 1 }
                }
            }
        }
        #expect(errors.get() == 0)
        #expect(try count("SELECT n FROM t WHERE id = 1") == 400)
    }

    /// The statement cache answers each text with its own statement: texts of one length that
    /// differ in a single byte, anywhere (the fold of `SQLKey` reads every byte), each keep theirs.
    @Test func statementCacheTellsAlikeTextsApart() throws {
        let head = "SELECT '", tail = "' AS v, 1 AS padding_padding_padding"
        let body = Array("abcdefghijklmnopqrstuvwxyz0123456789".utf8)
        var texts: [String] = []
        for i in body.indices {
            var b = body
            b[i] = UInt8(ascii: "_")
            texts.append(head + String(decoding: b, as: UTF8.self) + tail)
        }
        texts.append(head + String(decoding: body, as: UTF8.self) + tail)
        let folds = Set(texts.map { t in var t = t; return t.withUTF8 { SQLKey.fold($0) } })
        #expect(folds.count == texts.count)
        for _ in 0..<2 {   // the second round answers from the cache
            for t in texts {
                let v = try f.database.read { (c) throws(ParseError) in try c.scalar(t) }
                let want = String(t.dropFirst(head.count).dropLast(tail.count))
                #expect(v == .text(want))
            }
        }
    }

    @Test func regexpFunction() throws {
        func match(_ pattern: String, _ text: String, _ opts: String? = nil) throws(ParseError) -> SQLiteValue? {
            try f.database.read { (c) throws(ParseError) in
                if let opts { return try c.scalar("SELECT regexp(?, ?, ?)", [.text(pattern), .text(text), .text(opts)]) }
                return try c.scalar("SELECT ? REGEXP ?", [.text(text), .text(pattern)])
            }
        }
        #expect(try match("^caf(e|é)+$", "cafe") == .integer(1))
        #expect(try match("^Hello", "hello world") == .integer(0))
        #expect(try match("^Hello", "hello world", "i") == .integer(1))
        #expect(try match("[0-9]{3}", "ab12c") == .integer(0))
        #expect(try match("a", "b", "") == .integer(0))
        let ok = String(repeating: "a", count: 256)
        #expect(try match(ok, ok) == .integer(1))
        #expect(parseCode { try match(String(repeating: "a", count: 257), "a") } == 102)
        #expect(parseCode { try match("(a)\\1", "aa") } == 102)
        #expect(parseCode { try match("(unclosed", "x") } == 102)
        #expect(try match("\\\\1", "\\1") == .integer(1))  // an escaped backslash, not a back-reference
        let null = try f.database.read { (c) throws(ParseError) in try c.scalar("SELECT regexp('a', NULL)") }
        #expect(null == .null)
    }

    @Test func geoDistanceIsHaversineInRadians() throws {
        let d = try f.database.read { (c) throws(ParseError) in
            try c.scalar("SELECT geo_distance(?, ?, ?, ?)", [.real(0), .real(0), .real(0), .real(90)])
        }
        guard case .real(let r)? = d else { Issue.record("no result"); return }
        #expect(abs(r - Double.pi / 2) < 1e-12)
        // Paris → London is about 343.5 km.
        let km = geoDistanceRadians(lat1: 48.8566, lng1: 2.3522, lat2: 51.5074, lng2: -0.1278) * 6371.0
        #expect(abs(km - 343.5) < 1.5)
    }

    /// `geo_point_distance` and `geo_point_in_box` (one pass over the document) give exactly
    /// what the `json_extract` forms they replaced give, bit for bit, on documents built to
    /// mislead a scanner: the key inside strings and nested objects, escapes, braces in strings,
    /// numbers in every JSON spelling, members missing or repeated.
    @Test func storedPointFunctionsReadWhatJSONExtractReads() throws {
        var rng = SystemRandomNumberGenerator()
        func number(_ v: Double) -> String {
            switch Int.random(in: 0..<6, using: &rng) {
            case 0: return String(Int(v.rounded()))
            case 1: return String(format: "%.17g", v)
            case 2: return String(format: "%.3e", v)
            case 3: return String(format: "%.6E", v)
            default: return "\(v)"
            }
        }
        func decoy() -> String {
            ["\"text\":\"a \\\"loc\\\":{\\\"latitude\\\":1} }]{[\"", "\"n\":{\"loc\":{\"latitude\":5,\"longitude\":6}}",
             "\"arr\":[{\"loc\":1},\"]\",[[]],{}]", "\"l\\u006fc\":{\"latitude\":7,\"longitude\":8}", "\"x\":null", "\"b\":true",
             "\"e\":\"\\\\\"", "\"num\":-1.5e-3"].randomElement(using: &rng)!
        }
        var docs: [String] = []
        for _ in 0..<3000 {
            let lat = Double.random(in: -90...90, using: &rng), lng = Double.random(in: -180...180, using: &rng)
            var inner = ["\"__type\":\"GeoPoint\""]
            switch Int.random(in: 0..<10, using: &rng) {
            case 0: inner.append("\"latitude\":\(number(lat))")                          // no longitude
            case 1: inner += ["\"longitude\":\(number(lng))", "\"latitude\" : \(number(lat))"]
            case 2: inner += ["\"latitude\":\(number(lat))", "\"longitude\":\(number(lng))", "\"latitude\":0"]  // repeated: first wins
            default: inner += ["\"latitude\":\(number(lat))", "\"longitude\":\(number(lng))"]
            }
            inner.shuffle(using: &rng)
            var members = (0..<Int.random(in: 0..<4, using: &rng)).map { _ in decoy() }
            switch Int.random(in: 0..<12, using: &rng) {
            case 0: break                                                                     // no point
            case 1: members.append("\"loc\":null")
            case 2: members.append("\"loc\":[1,2]")
            default: members.append("\"loc\": {" + inner.joined(separator: ", ") + "}")
            }
            members.shuffle(using: &rng)
            docs.append("{" + members.joined(separator: ",") + "}")
        }
        // Boxes through stored coordinates exercise the inclusive edges.
        let results = try f.database.read { (c) throws(ParseError) -> [(SQLiteValue?, SQLiteValue?, SQLiteValue?, SQLiteValue?)] in
            try docs.map { (d) throws(ParseError) in
                let lat = "json_extract(?1,'$.loc.latitude')", lng = "json_extract(?1,'$.loc.longitude')"
                let cLat = Double.random(in: -90...90, using: &rng), cLng = Double.random(in: -180...180, using: &rng)
                let p: [SQLiteValue] = [.text(d), .real(cLat), .real(cLng)]
                let old = try c.scalar("SELECT geo_distance(\(lat),\(lng),?2,?3)", p)
                let new = try c.scalar("SELECT geo_point_distance(?1,'loc',?2,?3)", p)
                var s = Double.random(in: -90...0, using: &rng), n = Double.random(in: 0...90, using: &rng)
                var w = Double.random(in: -180...180, using: &rng), e = Double.random(in: -180...180, using: &rng)
                if case .real(let y)? = try c.scalar("SELECT \(lat)", [.text(d)]), Bool.random(using: &rng) { s = y; n = y }
                if case .real(let x)? = try c.scalar("SELECT \(lng)", [.text(d)]), Bool.random(using: &rng) { if Bool.random(using: &rng) { w = x } else { e = x } }
                let b: [SQLiteValue] = [.text(d), .real(s), .real(n), .real(w), .real(e)]
                // As a filter (NULL and 0 both reject, and `$nor` coalesces NULL to 0): the old
                // form is 0 rather than NULL when one coordinate is missing and the other outside.
                let oldBox = try c.scalar(w <= e ? "SELECT coalesce(\(lat) BETWEEN ?2 AND ?3 AND \(lng) BETWEEN ?4 AND ?5, 0)"
                                                 : "SELECT coalesce(\(lat) BETWEEN ?2 AND ?3 AND (\(lng) >= ?4 OR \(lng) <= ?5), 0)", b)
                let newBox = try c.scalar("SELECT coalesce(geo_point_in_box(?1,'loc',?2,?3,?4,?5), 0)", b)
                return (old, new, oldBox, newBox)
            }
        }
        var points = 0
        for (i, r) in results.enumerated() {
            #expect(r.0 == r.1, "distance differs for \(docs[i])")
            #expect(r.2 == r.3, "box differs for \(docs[i])")
            if case .real? = r.1 { points += 1 }
        }
        #expect(points > 1500)   // most documents do hold a point
        // A coordinate that is not a number is no point (json_extract would hand the text on).
        let text = try f.database.read { (c) throws(ParseError) in
            try c.scalar("SELECT geo_point_distance('{\"loc\":{\"latitude\":\"1\",\"longitude\":2}}','loc',0,0)")
        }
        #expect(text == .null)
    }

    @Test func requestIdsAreDedupedForFiveMinutes() throws {
        let t0: Int64 = 1_790_000_000_000
        #expect(try f.database.recordRequestId("req-1", now: t0))
        #expect(try !f.database.recordRequestId("req-1", now: t0 + 1000))
        #expect(try f.database.recordRequestId("req-2", now: t0 + 1000))
        #expect(try !f.database.recordRequestId("req-1", now: t0 + 299_999))
        #expect(try f.database.recordRequestId("req-1", now: t0 + 300_001 + 1000))
    }

    @Test func backupCopiesTheDatabase() throws {
        try f.database.write { (tx) throws(ParseError) in
            for i in 0..<50 { try tx.connection.run("INSERT INTO t(v) VALUES(?)", [.text("row\(i)")]) }
        }
        let out = f.dir + "/backup.sqlite"
        try f.database.backup(to: out)
        let copy = try Connection(path: out)
        #expect(try copy.scalar("SELECT count(*) FROM t") == .integer(50))
        copy.close()
        try f.database.checkpoint()
    }

    /// Bulk work (jobs) raises the checkpoint thread's threshold to 256 MiB of WAL, and what the
    /// WAL holds is copied into the file when it ends; ordinary commits go back to the ordinary
    /// threshold. SQLite's own `wal_autocheckpoint` is never used (its pragma would replace the
    /// hook that hands checkpoints to the checkpoint thread).
    @Test func bulkWorkDefersCheckpointsUntilItEnds() throws {
        let path = f.database.path
        func fileSize() throws -> Int { (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1 }
        func fill(_ tag: String) throws {
            try f.database.write { (tx) throws(ParseError) in
                try tx.connection.run("""
                    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1500)
                    INSERT INTO t(v) SELECT ? || i || hex(randomblob(1000)) FROM n
                    """, [.text(tag)])
            }
        }
        let ordinary = f.database.checkpointThresholdFrames
        #expect(ordinary == Database.Options().checkpointFrames)
        try f.database.checkpoint()
        let start = try fileSize()
        f.database.beginBulkWork()
        #expect(f.database.checkpointThresholdFrames == 65536)
        try fill("a")  // under the bulk threshold: nothing copied into the file yet
        #expect(try fileSize() == start)
        f.database.endBulkWork()
        #expect(f.database.checkpointThresholdFrames == ordinary)
        #expect(try fileSize() > start + 2_000_000)   // the WAL was copied when the bulk work ended
        try fill("b")
        #expect(try count() == 3000)
    }

    /// Commits that find the WAL over the threshold each ask the checkpoint thread for a round,
    /// also while one runs; the round's end serves them all. A second round begun at once found
    /// nothing to copy and held the writer for its syncs.
    @Test func checkpointRoundsRunOnlyWhenTheWALCallsForOne() throws {
        var options = Database.Options()
        options.checkpointFrames = 8
        let db = try Database(path: f.dir + "/rounds.sqlite", options: options)
        defer { db.close() }
        try db.write { (tx) throws(ParseError) in
            try tx.connection.execute("CREATE TABLE r(id INTEGER PRIMARY KEY, v TEXT)")
        }
        // Each commit writes a few pages: past the threshold after a few, and again while the
        // round it asked for copies and waits for the writer.
        for i in 0..<400 {
            try db.write { (tx) throws(ParseError) in
                try tx.connection.run("INSERT INTO r(v) VALUES(?)", [.text(String(repeating: "x", count: 3000 + i))])
            }
        }
        let deadline = monotonicNanos() + 10_000_000_000
        var last = -1
        while monotonicNanos() < deadline {   // until the thread has been idle for 200 ms
            let now = db.checkpointRounds.all
            if now == last { break }
            last = now
            usleep(200_000)
        }
        let rounds = db.checkpointRounds
        #expect(rounds.all > 0)
        #expect(rounds.needless == 0)
    }

    /// A statement found by its plan number answers like the one found by its text, again and
    /// again, and a re-entrant use of the same plan gets its own statement.
    @Test func statementsFoundByPlanNumberAnswerAsByText() throws {
        try f.database.write { (tx) throws(ParseError) in
            for i in 0..<3 { try tx.connection.run("INSERT INTO t(v) VALUES(?)", [.text("p\(i)")]) }
            let sql = "SELECT v FROM t WHERE v >= ? ORDER BY id"
            for _ in 0..<3 {
                var seen: [String] = []
                try tx.connection.query(plan: 7, sql, [.text("p1")]) { (s) throws(ParseError) in
                    seen.append(s.text(0) ?? "")
                    var inner = 0
                    try tx.connection.query(plan: 7, sql, [.text("p0")]) { (_) throws(ParseError) in inner += 1 }
                    #expect(inner == 3)
                }
                #expect(seen == ["p1", "p2"])
            }
        }
    }

    @Test func statementsAreCachedAndReentrantUseIsSafe() throws {
        try f.database.write { (tx) throws(ParseError) in
            for i in 0..<3 { try tx.connection.run("INSERT INTO t(v) VALUES(?)", [.text("r\(i)")]) }
            var outer = 0
            try tx.connection.query("SELECT v FROM t ORDER BY id") { (_) throws(ParseError) in
                outer += 1
                // Same SQL while the cached statement is mid-iteration: gets its own statement.
                var inner = 0
                try tx.connection.query("SELECT v FROM t ORDER BY id") { (_) throws(ParseError) in inner += 1 }
                #expect(inner == 3)
            }
            #expect(outer == 3)
        }
    }
}

/// A value shared between test threads.
final class LockedBox<T: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: every access goes through `lock`.
    private var value: T
    private let lock = NSLock()
    init(_ v: T) { value = v }
    func get() -> T { lock.lock(); defer { lock.unlock() }; return value }
    func set(_ v: T) { lock.lock(); value = v; lock.unlock() }
    func update(_ f: (inout T) -> Void) { lock.lock(); f(&value); lock.unlock() }
}
