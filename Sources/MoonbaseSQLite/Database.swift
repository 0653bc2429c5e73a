import CSQLite
import MoonbaseCore
import Synchronization

/// The SQLite database of a Moonbase host: one serialised writer connection plus one read
/// connection per thread (WAL lets readers run while the writer writes).
///
/// Thread-safety: `Sendable`. `write` serialises callers on a mutex; a nested `write` on a
/// thread that already holds the writer joins its transaction through a savepoint, so Cloud Code
/// triggers calling `db.*` inside a write never deadlock. `read` uses the calling thread's own
/// read connection, or the writer connection when the thread is inside a write (so reads see the
/// transaction's own changes).
///
/// ```swift
/// let db = try Database(path: "data/moonbase.sqlite")
/// let n = try db.write { tx throws(ParseError) in try tx.connection.run("DELETE FROM t WHERE x = ?", [.integer(1)]) }
/// let count = try db.read { c throws(ParseError) in try c.scalar("SELECT count(*) FROM t") }
/// ```
public final class Database: Sendable {
    /// Tuning for the connections of a database.
    public struct Options: Sendable {
        public var writer = Connection.Options()
        public var reader = Connection.Options()
        /// The writer's page cache while bulk work runs (`beginBulkWork`): bulk deletes dirty the
        /// random-keyed indexes (objectId, pointers) everywhere, and 32 MiB holds a 250 ms job
        /// transaction's pages where 8 or 16 MiB spilled and re-read them (W6: WAL + reads
        /// 7.1 -> 4.5 GB, CPU 11.5 -> 9.7 s, 6.9k -> 8.2-9.3k posts/s).
        public var bulkWriterCacheKiB = 32768
        /// The WAL size (pages) that triggers a checkpoint while bulk work runs, instead of
        /// `checkpointFrames` (measured against SQLite's default 1000 pages, 4 MiB). Each commit of a bulk job dirties most pages of the random-keyed
        /// indexes (about 40 MB per W6 commit at 100,000 posts), and each checkpoint copied them
        /// all back into the file again: checkpointing every 256 MiB copies a page rewritten by
        /// several commits once (W6 replayed, 2,000-post transactions: at 20,000 posts 1000 ->
        /// 16384 pages cut commit CPU 19-22 -> 13-14 µs per post; at 100,000 posts 16384 ->
        /// 65536 pages cut it 36-38 -> 27-28 µs and the bytes written 8 -> 3.5 GB).
        public var bulkWALAutocheckpointPages = 65536
        /// How long `write` waits for the writer before answering "database busy".
        public var writeLockTimeoutMillis = 30_000
        /// WAL size (frames, one per page written) from which the WAL is copied into the
        /// database file (as SQLite's `wal_autocheckpoint`, default 1000), by a thread of its own
        /// (`Checkpointer`) rather than inside the commit that crossed it.
        ///
        /// 40,000 frames (~160 MiB) rather than 10,000: under sustained creates the writer appends
        /// ~64,000 frames a second, and each round copies the hot pages (the rightmost leaves of
        /// the append-ordered indexes, every index's upper levels) once more. W2 on a 100,000-post
        /// copy, alternated runs: 10,000 → 9.1–9.7k req/s, 117–124 µs CPU per create; 20,000 →
        /// 10.5–10.8k; 40,000 → 11.0–11.5k, 104–109 µs. Creates and map reads at once (c16 + c8)
        /// read as fast and with the same p50 (1.54–1.60 → 1.60–1.64 ms) while the WAL grew to
        /// ~185 MiB. The cost is disk: the WAL file keeps its largest size until shutdown, and a
        /// restart after a crash re-reads up to that much WAL once.
        public var checkpointFrames = 40000
        public init() {
            // The writer's everyday cache stays small (RssAnon budget: < 60 MiB after W1-W5;
            // 33 MiB measured at 8 MiB, 59 MiB at 32 MiB). Bulk jobs raise it while they run
            // (`bulkWriterCacheKiB`, see `beginBulkWork`).
            writer.cacheSizeKiB = 8192
            reader.cacheSizeKiB = 4096
            reader.readOnly = true
        }
    }

    /// Path of the database file.
    public let path: String
    public let options: Options
    let serial: Int
    private let lock = WriterLock()
    private let writerBox: WriterBox
    private let functions = Mutex<[SQLFunction]>([])
    private let bulkWork = Mutex<Int>(0)
    private let readerRegistry = Mutex<[ReaderRef]>([])
    private let isClosed = Atomic<Bool>(false)
    private let contextSlot = Mutex<WeakContext>(WeakContext())
    /// Write transactions committed so far (a held read transaction older than the last one is
    /// replaced before the next read).
    private let commits = Atomic<UInt64>(0)
    private let wal: WALState

    private static let serials = Atomic<Int>(0)

    /// Opens the database (creating the file) and sets WAL and the pragmas. Tables are the
    /// layer above's business (MoonbaseStore's `Migrator` creates its own).
    /// - Throws: `ParseError` 1 when the file cannot be opened.
    public init(path: String, options: Options = Options()) throws(ParseError) {
        self.path = path
        self.options = options
        self.serial = Database.serials.add(1, ordering: .relaxed).newValue
        let writer = try Connection(path: path, options: options.writer)
        self.writerBox = WriterBox(writer)
        wal = WALState(threshold: options.checkpointFrames,
                       checkpointer: Checkpointer(path: path, options: options.writer))
        wal.checkpointer.database = self
        // Replaces SQLite's automatic checkpoint: the same PASSIVE checkpoints at the same size,
        // on the checkpoint thread instead of in the commit.
        sqlite3_wal_hook(writer.handle, walHook, Unmanaged.passUnretained(wal).toOpaque())
    }

    deinit { close() }

    /// A slot for the layer above (MoonbaseStore keeps its schema catalog and clock here), so
    /// its extensions on `WriteTransaction` reach them through `tx.database`. Held weakly: the
    /// owner of that object (the document store) keeps it alive, and it may reference us.
    public var context: (any AnyObject & Sendable)? {
        get { contextSlot.withLock { $0.value } }
        set { contextSlot.withLock { $0.value = newValue } }
    }

    /// Installs a Swift SQL function on the writer now and on every read connection opened
    /// afterwards. Register functions at start-up, before the first read.
    public func register(_ f: SQLFunction) throws(ParseError) {
        functions.withLock { $0.append(f) }
        try write { (tx) throws(ParseError) in try tx.connection.install(f) }
    }

    // MARK: Writing

    /// Runs `body` in a write transaction (`BEGIN IMMEDIATE … COMMIT`, `ROLLBACK` on a thrown
    /// error). Nested on a thread already writing: joins the open transaction in a savepoint.
    /// - Parameter short: the body is one object's write that runs no Lua (tens of
    ///   microseconds): a write started on an I/O thread may wait for it rather than go to a worker.
    /// - Throws: the body's error, or `ParseError` 1 "database busy" after
    ///   `writeLockTimeoutMillis`, or the commit failure; on an I/O thread (`InlineAttempt`),
    ///   `InlineAttempt.continuesOnWorker` when the write would have to wait.
    @discardableResult
    public func write<T>(short: Bool = false, _ body: (WriteTransaction) throws(ParseError) -> T) throws(ParseError) -> T {
        let state = ThreadDatabaseState.current.value
        if let tx = state.transaction(for: serial) { return try tx.nested(body) }
        endHeldRead(state)   // this thread's next read must see this write
        guard !isClosed.load(ordering: .acquiring) else { throw ParseError.internalError("database is closed") }
        let inline = InlineAttempt.active
        // A read attempt may be cut short and run again (see `InlineAttempt`): it must never
        // have written. Nothing a find or get does writes; this keeps it so.
        if inline && InlineAttempt.hasReadBudget { throw InlineAttempt.continuesOnWorker }
        if inline {
            try lockInline()
        } else {
            // Waiting for the writer is bounded by its own timeout: the worker pool's stuck-worker
            // backstop must not take a request queued behind other writers for a stuck one.
            JobWatch.noteLimit(millis: Int64(options.writeLockTimeoutMillis))
            guard lock.lock(timeoutMillis: options.writeLockTimeoutMillis) else {
                throw ParseError(.internalError, "database busy", underlying: "writer lock wait timed out")
            }
        }
        if short || inline { wal.shortHold.store(true, ordering: .releasing) }
        defer {
            wal.shortHold.store(false, ordering: .releasing)
            lock.unlock()
        }
        let conn = writerBox.connection
        let tx = WriteTransaction(connection: conn, database: self)
        state.transactions.append((serial, tx))
        defer { state.transactions.removeAll { $0.db == serial } }
        if inline {
            // Another process holding the file's write lock would keep this thread in SQLite's
            // busy handler: do not wait for it here.
            conn.setBusyTimeout(0)
            defer { conn.setBusyTimeout(options.writer.busyTimeoutMillis) }
            do throws(ParseError) { try conn.run("BEGIN IMMEDIATE") } catch { throw InlineAttempt.continuesOnWorker }
        } else {
            try conn.run("BEGIN IMMEDIATE")
        }
        do {
            let result = try body(tx)
            try conn.run("COMMIT")
            commits.add(1, ordering: .releasing)   // held reads on other threads take a fresh snapshot
            StoreHealth.shared.writeSucceeded()
            tx.runCommitHooks()
            return result
        } catch {
            if !conn.isAutocommit { _ = try? conn.run("ROLLBACK") }
            if error.message == SQLiteError.diskFullMessage { StoreHealth.shared.diskFull(path: path) }
            throw error
        }
    }

    /// Takes the writer for a write started on an I/O thread, only when that costs no real wait:
    /// the writer is free, or held by a short write (see `write(short:)`) and free within a
    /// millisecond, and the commit will not sync anything. Otherwise the write continues on a
    /// worker. A REST write waits for nothing (`InlineAttempt.mayWaitForWriter`): held
    /// writer means other writes are under way, and it joins their next batch instead.
    private func lockInline() throws(ParseError) {
        // The next commit starts the WAL over, which syncs its header to disk: a worker's job.
        guard !wal.restartDue.load(ordering: .acquiring) else { throw InlineAttempt.continuesOnWorker }
        guard lock.tryLock() || (InlineAttempt.mayWaitForWriter && wal.shortHold.load(ordering: .acquiring)
                                 && lock.lock(timeoutMillis: 1)) else {
            throw InlineAttempt.continuesOnWorker
        }
    }

    /// The end of a checkpoint round (see `Checkpointer`): under the writer lock, copies what
    /// was written since the round's unlocked part, so that the next write starts the WAL over.
    func finishCheckpoint() {
        guard !isClosed.load(ordering: .acquiring), lock.lock(timeoutMillis: options.writeLockTimeoutMillis) else { return }
        defer { lock.unlock() }
        var logFrames: Int32 = 0
        var copied: Int32 = 0
        let rc = sqlite3_wal_checkpoint_v2(writerBox.connection.handle, "main", SQLITE_CHECKPOINT_PASSIVE, &logFrames, &copied)
        if rc == SQLITE_OK, logFrames > 0, copied == logFrames { wal.restartDue.store(true, ordering: .releasing) }
    }

    /// The write transaction the calling thread holds on this database, if any.
    public var currentTransaction: WriteTransaction? {
        ThreadDatabaseState.current.existing?.transaction(for: serial)
    }

    // MARK: Reading

    /// How many SQLite virtual-machine steps pass between two checks of a read attempt's
    /// budget (`sqlite3_progress_handler`): a W3s find takes a few thousand, one check costs
    /// tens of nanoseconds.
    static let progressSteps: Int32 = 1000

    /// Runs `body` with this thread's read connection (opened on first use), or with the
    /// writer connection when this thread is inside `write`.
    public func read<T>(_ body: (Connection) throws(ParseError) -> T) throws(ParseError) -> T {
        let state = ThreadDatabaseState.current.value
        if let tx = state.transaction(for: serial) { return try body(tx.connection) }
        let conn: Connection
        if let c = state.reader(for: serial), !c.closed {
            conn = c
        } else {
            guard !isClosed.load(ordering: .acquiring) else { throw ParseError.internalError("database is closed") }
            state.pruneClosedReaders()
            conn = try Connection(path: path, options: options.reader, functions: functions.withLock { $0 })
            // Reads attempted on an I/O thread stop when their budget is spent (see
            // `InlineAttempt`); elsewhere the check finds no attempt and costs a thread-local read.
            sqlite3_progress_handler(conn.handle, Database.progressSteps, { _ in InlineAttempt.progressCheck() }, nil)
            state.readers.append((serial, conn))
            readerRegistry.withLock { regs in
                regs.removeAll { $0.connection == nil }
                regs.append(ReaderRef(conn))
            }
        }
        if !state.heldReads.isEmpty && state.readDepth == 0 { try beginHeldRead(state, conn) }
        state.readDepth += 1
        defer { state.readDepth -= 1 }
        return try body(conn)
    }

    // MARK: Held reads

    /// How long one held read transaction may serve at most (a safety net for writers this
    /// process does not count, such as another process on the same file).
    public static let heldReadMaxNanos: UInt64 = 20_000_000

    /// From now until `releaseReads`, this thread's reads share one read transaction while no
    /// write commits (SQLite starts one per statement otherwise: its WAL read lock taken and
    /// dropped, with two `fcntl` calls, on every read). Meant for a run of reads by one caller (a
    /// Cloud Code call). Each read still sees every write committed before it began: a commit
    /// by any thread (counted in `commits`) makes the next held read take a fresh snapshot, and
    /// a write on this thread ends the held transaction first. Idempotent.
    public func holdReads() {
        let state = ThreadDatabaseState.current.value
        if !state.heldReads.contains(where: { $0.db == serial }) { state.heldReads.append((serial, 0, 0)) }
    }

    /// Ends what `holdReads` started: the read transaction (if one is open) ends now, and each
    /// read runs on its own again. Idempotent.
    public func releaseReads() {
        guard let state = ThreadDatabaseState.current.existing, !state.heldReads.isEmpty else { return }
        endHeldRead(state)
        state.heldReads.removeAll { $0.db == serial }
    }

    /// Opens the held read transaction on `conn`, or replaces one that is too old.
    private func beginHeldRead(_ state: ThreadDatabaseState, _ conn: Connection) throws(ParseError) {
        guard let i = state.heldReads.firstIndex(where: { $0.db == serial }) else { return }
        let committed = commits.load(ordering: .acquiring)
        if !conn.isAutocommit {
            let held = state.heldReads[i]
            if held.began != 0 && held.commits == committed && monotonicNanos() - held.began < Self.heldReadMaxNanos { return }
            try conn.run("COMMIT")   // a write committed since, too old, or left open: a fresh snapshot
        }
        try conn.run("BEGIN")
        state.heldReads[i].began = monotonicNanos()
        state.heldReads[i].commits = committed
    }

    /// Ends this thread's held read transaction on this database, if one is open.
    private func endHeldRead(_ state: ThreadDatabaseState) {
        guard let i = state.heldReads.firstIndex(where: { $0.db == serial }), state.heldReads[i].began != 0 else { return }
        state.heldReads[i].began = 0
        if let conn = state.reader(for: serial), !conn.closed, !conn.isAutocommit { _ = try? conn.run("COMMIT") }
    }

    // MARK: Maintenance

    /// Raises the writer's page cache to `options.bulkWriterCacheKiB` and the checkpoint thread's
    /// threshold to `options.bulkWALAutocheckpointPages` while bulk work (a job) runs;
    /// `endBulkWork` lowers both again, releases the pages and checkpoints what the WAL holds
    /// when the last one ends (so the next ordinary commit does not pay for it). Nested and
    /// concurrent calls are counted. Best effort: a failure only costs speed.
    public func beginBulkWork() {
        let first = bulkWork.withLock { n -> Bool in
            n += 1
            return n == 1
        }
        if first {
            wal.threshold.store(max(options.checkpointFrames, options.bulkWALAutocheckpointPages), ordering: .releasing)
            setWriterTuning(cacheKiB: options.bulkWriterCacheKiB, ending: false)
        }
    }

    public func endBulkWork() {
        let last = bulkWork.withLock { n -> Bool in
            n = max(0, n - 1)
            return n == 0
        }
        if last {
            wal.threshold.store(max(1, options.checkpointFrames), ordering: .releasing)
            setWriterTuning(cacheKiB: options.writer.cacheSizeKiB, ending: true)
        }
    }

    /// The checkpoint size is the checkpoint thread's threshold (`WALState`), never SQLite's
    /// `wal_autocheckpoint` pragma: that pragma installs SQLite's own WAL hook in place of ours,
    /// which would bring checkpoints back into commits for good.
    private func setWriterTuning(cacheKiB kib: Int, ending: Bool) {
        do {
            try write { (tx) throws(ParseError) in
                try tx.connection.execute("PRAGMA cache_size=-\(kib)" + (ending ? "; PRAGMA shrink_memory" : ""))
            }
            guard ending else { return }
            // Outside a transaction (a checkpoint cannot run inside one), under the writer lock;
            // PASSIVE: readers are not waited for, what they still use is copied later.
            guard lock.lock(timeoutMillis: options.writeLockTimeoutMillis) else { return }
            defer { lock.unlock() }
            guard !isClosed.load(ordering: .acquiring) else { return }
            try writerBox.connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
        } catch {
            Log.warn("writer not retuned for \(ending ? "ordinary" : "bulk") work: \(error.message)")
        }
    }

    /// Checkpoints the WAL into the main file and truncates it (`PRAGMA wal_checkpoint(TRUNCATE)`).
    public func checkpoint() throws(ParseError) {
        guard lock.lock(timeoutMillis: options.writeLockTimeoutMillis) else {
            throw ParseError(.internalError, "database busy")
        }
        defer { lock.unlock() }
        try writerBox.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    /// Copies the whole database to `destination` with SQLite's online backup API
    /// (https://sqlite.org/backup.html); writers may continue meanwhile.
    public func backup(to destination: String) throws(ParseError) {
        let source = try Connection(path: path, options: options.reader)
        let dest = try Connection(path: destination, options: Connection.Options())
        guard let b = sqlite3_backup_init(dest.handle, "main", source.handle, "main") else {
            throw Connection.error(dest.handle, sqlite3_errcode(dest.handle), sql: nil).parseError
        }
        var rc: Int32
        repeat {
            rc = sqlite3_backup_step(b, -1)
            if rc == SQLITE_BUSY || rc == SQLITE_LOCKED { sqlite3_sleep(10) }
        } while rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED
        sqlite3_backup_finish(b)
        guard rc == SQLITE_DONE else {
            throw SQLiteError(code: rc, message: String(cString: sqlite3_errstr(rc)), sql: nil).parseError
        }
        try dest.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    /// Checkpoints and closes every connection. Call at shutdown, once no thread reads or writes.
    public func close() {
        guard !isClosed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        wal.checkpointer.stop()
        if lock.lock(timeoutMillis: options.writeLockTimeoutMillis) {
            _ = try? writerBox.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            writerBox.connection.close()
            lock.unlock()
        }
        for r in readerRegistry.withLock({ $0 }) { r.connection?.close() }
    }

    public var closed: Bool { isClosed.load(ordering: .acquiring) }

    /// The WAL is at the checkpoint threshold or over it, and not yet all copied into the file.
    var walCallsForCheckpoint: Bool {
        !wal.restartDue.load(ordering: .acquiring)
            && Int(wal.frames.load(ordering: .relaxed)) >= wal.threshold.load(ordering: .acquiring)
    }

    /// Checkpoint rounds run so far, and those among them that began with nothing to do.
    var checkpointRounds: (all: Int, needless: Int) {
        (wal.checkpointer.rounds.load(ordering: .relaxed), wal.checkpointer.needlessRounds.load(ordering: .relaxed))
    }

    /// The WAL size (frames) from which a commit asks the checkpoint thread for a round now.
    public var checkpointThresholdFrames: Int { wal.threshold.load(ordering: .acquiring) }
}

/// The WAL size that calls for a checkpoint, the thread that runs them, and whether the writer
/// is held by a write known to be short (one object's insert, update or delete without
/// triggers: tens of microseconds).
final class WALState: Sendable {
    /// Frames from which a commit asks for a checkpoint: `checkpointFrames`, raised while bulk
    /// work runs (`beginBulkWork`).
    let threshold: Atomic<Int>
    /// The WAL is all copied into the database file: the next commit starts it over.
    let restartDue = Atomic<Bool>(false)
    /// The WAL's size in frames after the writer's last commit (set by the WAL hook).
    let frames = Atomic<Int32>(0)
    let shortHold = Atomic<Bool>(false)
    let checkpointer: Checkpointer
    init(threshold: Int, checkpointer: Checkpointer) {
        self.threshold = Atomic(max(1, threshold))
        self.checkpointer = checkpointer
    }
}

/// Called by SQLite after each commit of the writer with the WAL's size in frames: asks the
/// checkpoint thread for a round once it reaches the threshold.
private let walHook: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafePointer<CChar>?, Int32) -> Int32 = {
    ctx, _, _, frames in
    guard let ctx else { return SQLITE_OK }
    let wal = Unmanaged<WALState>.fromOpaque(ctx).takeUnretainedValue()
    wal.restartDue.store(false, ordering: .releasing)
    wal.frames.store(frames, ordering: .relaxed)
    if Int(frames) >= wal.threshold.load(ordering: .acquiring) { wal.checkpointer.request() }
    return SQLITE_OK
}

private struct WeakContext {
    weak var value: (any AnyObject & Sendable)?
}

/// Holds the writer connection. `@unchecked Sendable`: the connection is only touched while
/// `Database.lock` is held (or in `close`, also under the lock).
private final class WriterBox: @unchecked Sendable {
    let connection: Connection
    init(_ c: Connection) { connection = c }
}

/// A weak reference to a thread's read connection, so `close()` can close it at shutdown.
/// `@unchecked Sendable`: other threads only read the reference in `close()`, documented to run
/// after all readers are done.
private final class ReaderRef: @unchecked Sendable {
    weak var connection: Connection?
    init(_ c: Connection) { connection = c }
}
