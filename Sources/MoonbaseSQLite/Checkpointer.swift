import CSQLite
import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Copies the WAL into the database file on a thread of its own (started on first use), so
/// that no request waits for a checkpoint's writes and syncs: SQLite's automatic checkpoint ran
/// them inside the commit that crossed the WAL size limit, on whichever thread committed.
///
/// A round, once a commit left the WAL at `Database.Options.checkpointFrames` or more: two PASSIVE
/// checkpoints on the thread's own connection while writers go on (the bulk of the copying), then
/// one under the writer lock (the few frames written meanwhile), after which the next write
/// starts the WAL over. Readers still using old frames only delay that, as before.
///
/// `@unchecked Sendable`: every mutable field is guarded by `mutex`.
final class Checkpointer: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let cond: UnsafeMutablePointer<pthread_cond_t>
    private var requested = false
    private var stopping = false
    private var started = false
    private var exited = false
    private let path: String
    private var options: Connection.Options
    /// Checkpoint passes of a round made while writers go on, before its end under the writer
    /// lock. Under W2's creates (~9 rounds a second, 10 WAL frames per create) one pass left the
    /// end holding the writer 12–14 ms (median; its copying and two syncs), ~14% of the time;
    /// two passes: 6–8 ms, W2 p99 30 → 26–28 ms (alternated runs).
    static let unlockedPasses = 2

    /// The database whose writer finishes each round; set once, right after init.
    weak var database: Database?
    /// Rounds run, and rounds that began with nothing to do (the WAL under the threshold, or
    /// already all copied and waiting for the next commit to start it over): a measure for tests.
    let rounds = Atomic<Int>(0)
    let needlessRounds = Atomic<Int>(0)

    init(path: String, options: Connection.Options) {
        self.path = path
        self.options = options
        // Checkpoints copy frames file to file: no page cache needed.
        self.options.cacheSizeKiB = 64
        mutex = .allocate(capacity: 1)
        cond = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(cond, nil)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    /// Asks for a round (called after a commit, under the writer lock: only signals).
    func request() {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        guard !stopping else { return }
        requested = true
        if !started { started = start() }
        pthread_cond_signal(cond)
    }

    /// Ends the thread after its current round (call before closing the writer).
    func stop() {
        pthread_mutex_lock(mutex)
        stopping = true
        pthread_cond_broadcast(cond)
        while started && !exited { pthread_cond_wait(cond, mutex) }
        pthread_mutex_unlock(mutex)
    }

    private func start() -> Bool {
        let me = self
        guard spawnThread({ me.run() }) else {
            Log.warn("checkpoint thread not started: commits go on, the WAL is checkpointed at shutdown")
            return false
        }
        return true
    }

    private func run() {
        var conn: Connection?
        while true {
            pthread_mutex_lock(mutex)
            while !requested && !stopping { pthread_cond_wait(cond, mutex) }
            if stopping {
                exited = true
                pthread_cond_broadcast(cond)
                pthread_mutex_unlock(mutex)
                break
            }
            requested = false
            pthread_mutex_unlock(mutex)
            guard let db = database else { continue }
            rounds.add(1, ordering: .relaxed)
            if !db.walCallsForCheckpoint { needlessRounds.add(1, ordering: .relaxed) }
            if conn == nil {
                do throws(ParseError) {
                    conn = try Connection(path: path, options: options)
                } catch {
                    Log.warn("checkpoint connection: \(error.message)")
                }
            }
            if let conn {
                // Each pass copies what the WAL held when it began, and writers go on meanwhile:
                // a second pass copies what they wrote during the first, so the round's end,
                // under the writer lock, copies and syncs only what came during the second.
                for _ in 0..<Checkpointer.unlockedPasses {
                    guard sqlite3_wal_checkpoint_v2(conn.handle, "main", SQLITE_CHECKPOINT_PASSIVE, nil, nil) == SQLITE_OK else { break }
                }
            }
            db.finishCheckpoint()
            // Every commit that finds the WAL over the threshold asks for a round, also those
            // during this one: its end, under the writer lock, served them all. Left set, the
            // flag began a second round at once that had nothing to copy but held the writer
            // for its syncs (4–10 ms on this project's test machines), once per round.
            pthread_mutex_lock(mutex)
            requested = false
            pthread_mutex_unlock(mutex)
        }
        conn?.close()
    }
}
