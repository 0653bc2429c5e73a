import MoonbaseCore

#if canImport(Glibc)
import Glibc
#endif

/// The mutex serialising the single writer connection, with a bounded wait.
///
/// `@unchecked Sendable`: the pthread mutex is heap-allocated once, never moved, and is itself
/// the synchronisation primitive; nothing else is stored.
final class WriterLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Locks, waiting at most `timeoutMillis`; false on timeout.
    func lock(timeoutMillis: Int) -> Bool {
        if pthread_mutex_trylock(mutex) == 0 { return true }
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        let ns = Int(ts.tv_nsec) + (timeoutMillis % 1000) * 1_000_000
        ts.tv_sec += timeoutMillis / 1000 + ns / 1_000_000_000
        ts.tv_nsec = ns % 1_000_000_000
        return pthread_mutex_timedlock(mutex, &ts) == 0
    }

    /// Locks only if the mutex is free at once.
    func tryLock() -> Bool { pthread_mutex_trylock(mutex) == 0 }

    func unlock() { pthread_mutex_unlock(mutex) }
}

/// Per-thread bookkeeping shared by every `Database`: the write transactions this thread holds
/// (so nested writes join them and reads use the writer) and this thread's read connections.
/// Keyed by a database's unique serial number, never by address (addresses are reused).
final class ThreadDatabaseState {
    var transactions: [(db: Int, tx: WriteTransaction)] = []
    var readers: [(db: Int, conn: Connection)] = []
    /// Databases whose reads on this thread share one read transaction (`Database.holdReads`),
    /// with the monotonic time that transaction began (0: none open yet) and the database's
    /// commit count when it began.
    var heldReads: [(db: Int, began: UInt64, commits: UInt64)] = []
    /// `Database.read` bodies running on this thread (a held read transaction is only replaced
    /// between reads, never under a statement in progress).
    var readDepth = 0

    func transaction(for db: Int) -> WriteTransaction? {
        for t in transactions where t.db == db { return t.tx }
        return nil
    }

    func reader(for db: Int) -> Connection? {
        for r in readers where r.db == db { return r.conn }
        return nil
    }

    /// Drops read connections of databases that were closed since.
    func pruneClosedReaders() { readers.removeAll { $0.conn.closed } }

    static let current = ThreadLocal<ThreadDatabaseState> { ThreadDatabaseState() }
}
