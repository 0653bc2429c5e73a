import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A bounded, thread-safe pool of `PGConnection`s to one database, with transactions.
///
/// Thread-safety: `Sendable`. A connection belongs to one caller between checkout and return;
/// a connection that broke, or that is still inside a transaction, is closed instead of being
/// reused. `transaction` runs its body in `BEGIN ISOLATION LEVEL …` on one connection; a nested
/// `transaction` (or `withConnection`) on a thread already inside one joins it, through a
/// savepoint, as `Database.write` does on SQLite, so code that writes never needs to know
/// whether a caller opened a transaction. A serializable transaction that loses a race
/// (SQLSTATE 40001 / 40P01) runs again from the start, up to `Options.maxRetries` times, then
/// fails with 141.
///
/// ```swift
/// let pool = try PGPool(url: "postgres://postgres@127.0.0.1:5432/postgres")
/// try pool.transaction { (tx) throws(ParseError) in
///     let n = try tx.connection.execute("SELECT n FROM counter WHERE id = 1").scalar?.int64 ?? 0
///     try tx.connection.execute("UPDATE counter SET n = $1 WHERE id = 1", [.integer(n + 1)])
///     tx.onCommit { print("committed") }
/// }
/// ```
public final class PGPool: Sendable {
    public struct Options: Sendable {
        /// At most this many connections are open at once.
        public var maxConnections = 8
        /// How long a caller waits for a free connection before "database busy".
        public var acquireTimeoutMillis = 30_000
        /// Runs of a transaction after the first one, when it loses a serialization race.
        public var maxRetries = 3
        public var connectTimeoutSeconds = 10
        public init() {}
    }

    public let url: String
    public let options: Options
    let serial: Int
    private let gate: PoolGate
    private static let serials = Atomic<Int>(0)

    /// Opens the pool and one connection (so a wrong URL or an unreachable server fails here).
    /// - Throws: `ParseError` 1 "database connection lost" (503) when the server cannot be reached.
    public init(url: String, options: Options = Options()) throws(ParseError) {
        self.url = url
        self.options = options
        self.serial = PGPool.serials.add(1, ordering: .relaxed).newValue
        self.gate = PoolGate(limit: max(1, options.maxConnections))
        let first = try PGConnection(url: url, connectTimeoutSeconds: options.connectTimeoutSeconds)
        gate.adopt(first)
    }

    deinit { close() }

    /// Closes idle connections and refuses new checkouts. Connections in use are closed when returned.
    public func close() { gate.close() }

    /// Connections open now, idle or in use (tests, metrics).
    public var openConnections: Int { gate.openCount }

    // MARK: Connections

    /// Runs `body` with a connection: the calling thread's transaction connection when it is
    /// inside `transaction`, else a pooled one in autocommit mode.
    ///
    /// A thread asks the pool for one connection at a time: a `withConnection` or `transaction`
    /// nested in this one (an afterFind trigger's own query, run while the outer find still
    /// holds its connection) uses the connection this thread already holds. Taking a second one
    /// while holding the first is hold-and-wait: with as many threads as connections each
    /// holding one and waiting for another, all of them waited out the acquire timeout (seen as
    /// every worker stuck in an afterFind under 20 concurrent clients). Every statement reads
    /// its whole result before returning (no cursors, no single-row mode), so the outer caller
    /// finds the connection idle again when the nested one is done.
    @discardableResult
    public func withConnection<T>(_ body: (PGConnection) throws(ParseError) -> T) throws(ParseError) -> T {
        let state = PGThreadState.current.value
        if let tx = state.transaction(for: serial) { return try body(tx.connection) }
        let lease = try self.lease(state)
        defer { end(lease, state) }
        return try body(lease.conn)
    }

    /// A connection the calling thread holds: the one it already holds on this pool (`owned`
    /// false: its holder gives it back), or a pooled one, registered as held until `end`.
    private struct Lease {
        let conn: PGConnection
        let owned: Bool
    }

    private func lease(_ state: PGThreadState) throws(ParseError) -> Lease {
        if let held = state.held(for: serial) { return Lease(conn: held, owned: false) }
        let conn = try acquire()
        state.held.append((serial, conn))
        return Lease(conn: conn, owned: true)
    }

    private func end(_ lease: Lease, _ state: PGThreadState) {
        guard lease.owned else { return }
        state.held.removeAll { $0.pool == serial }
        gate.returnConnection(lease.conn)
    }

    private func acquire() throws(ParseError) -> PGConnection {
        switch gate.checkout(timeoutMillis: options.acquireTimeoutMillis) {
        case .connection(let c):
            return c
        case .mayOpen:
            do {
                return try PGConnection(url: url, connectTimeoutSeconds: options.connectTimeoutSeconds)
            } catch {
                gate.openFailed()
                throw error
            }
        case .timedOut:
            throw ParseError(.internalError, "database busy", underlying: "no pooled PostgreSQL connection within \(options.acquireTimeoutMillis) ms",
                             headers: [("Retry-After", "1")], status: 503)
        case .closed:
            throw ParseError.internalError("database pool is closed")
        }
    }

    // MARK: Transactions

    /// The transaction the calling thread holds on this pool, if any.
    public var currentTransaction: PGTransaction? {
        PGThreadState.current.existing?.transaction(for: serial)
    }

    /// Runs `body` in a transaction and commits it; rolls back when `body` throws. Nested on a
    /// thread already in a transaction of this pool: joins it in a savepoint (the isolation
    /// level is the outer one's). Work registered with `onCommit` runs after the outermost
    /// commit, outside the transaction, in registration order.
    ///
    /// `exclusive`: an advisory lock key taken on the connection BEFORE `BEGIN` and released after
    /// `COMMIT`/`ROLLBACK`, so the transactions that pass the same key run one at a time across
    /// every host, each with a snapshot taken after the previous one committed (taking the lock
    /// inside the transaction would keep the older snapshot and fail at commit).
    /// - Throws: the body's error; 141 when the transaction still loses a serialization race
    ///   after `options.maxRetries` further runs; 503 when the database cannot be reached.
    @discardableResult
    public func transaction<T>(isolation: PGIsolation = .serializable, exclusive: Int64? = nil,
                               _ body: (PGTransaction) throws(ParseError) -> T) throws(ParseError) -> T {
        let state = PGThreadState.current.value
        if let tx = state.transaction(for: serial) { return try tx.nested(body) }
        var retries = 0
        var reconnects = 0
        while true {
            // Inside `withConnection` on this thread, the transaction runs on that connection.
            let lease = try self.lease(state)
            let conn = lease.conn
            conn.resetConflict()
            do {
                if let key = exclusive { _ = try conn.execute("SELECT pg_advisory_lock($1)", [.integer(key)]) }
                try conn.execute("BEGIN ISOLATION LEVEL \(isolation.sql)")
            } catch {
                release(exclusive, on: conn)
                end(lease, state)
                // Nothing ran yet: a pooled connection that died while idle (server restart) is
                // replaced once rather than failing the caller.
                if !conn.isUsable && reconnects == 0 && lease.owned {
                    reconnects += 1
                    continue
                }
                throw error
            }
            let tx = PGTransaction(connection: conn, pool: self)
            state.transactions.append((serial, tx))
            let outcome: Result<T, ParseError>
            do {
                let value = try body(tx)
                if !conn.isInFailedTransaction {
                    try conn.execute("COMMIT")
                    outcome = .success(value)
                } else {
                    // A statement failed and the body carried on: PostgreSQL would turn COMMIT
                    // into ROLLBACK without an error, so say it.
                    outcome = .failure(ParseError.internalError("transaction aborted by an earlier failed statement"))
                }
            } catch {
                outcome = .failure(error)
            }
            state.transactions.removeAll { $0.pool == serial }
            switch outcome {
            case .success(let value):
                release(exclusive, on: conn)
                end(lease, state)
                tx.runCommitHooks()
                return value
            case .failure(let error):
                if conn.isUsable && !conn.isIdle { _ = try? conn.execute("ROLLBACK") }
                release(exclusive, on: conn)
                end(lease, state)
                guard conn.sawConflict else { throw error }
                guard retries < options.maxRetries else {
                    throw ParseError(.scriptFailed, PGError.conflictMessage,
                                     underlying: "gave up after \(retries + 1) runs: \(error.underlying ?? error.message)")
                }
                retries += 1
                // A short random pause keeps two losers from colliding again in lockstep.
                usleep(UInt32.random(in: 1_000...(5_000 * UInt32(retries))))
            }
        }
    }
}

extension PGPool {
    /// Releases the session advisory lock `key` taken for an exclusive transaction. A connection
    /// that cannot say it released it is closed (the server then drops its locks), never reused
    /// while holding a lock every other host would wait for.
    func release(_ key: Int64?, on conn: PGConnection) {
        guard let key, conn.isUsable else { return }
        let released = (try? conn.execute("SELECT pg_advisory_unlock($1)", [.integer(key)]))?.scalar
        if case .bool(true)? = released { return }
        conn.close()
    }
}

/// Transaction isolation levels (https://www.postgresql.org/docs/15/transaction-iso.html).
public enum PGIsolation: Sendable {
    case readCommitted, repeatableRead, serializable

    var sql: String {
        switch self {
        case .readCommitted: return "READ COMMITTED"
        case .repeatableRead: return "REPEATABLE READ"
        case .serializable: return "SERIALIZABLE"
        }
    }
}

/// Per-thread bookkeeping shared by every pool: the transactions this thread holds, keyed by
/// the pool's serial number (addresses are reused).
final class PGThreadState {
    var transactions: [(pool: Int, tx: PGTransaction)] = []
    /// Connections this thread holds through `withConnection`, outside any transaction.
    var held: [(pool: Int, conn: PGConnection)] = []

    func transaction(for pool: Int) -> PGTransaction? {
        for t in transactions where t.pool == pool { return t.tx }
        return nil
    }

    func held(for pool: Int) -> PGConnection? {
        for h in held where h.pool == pool { return h.conn }
        return nil
    }

    static let current = ThreadLocal<PGThreadState> { PGThreadState() }
}

/// The pool's state under a pthread mutex, with a condition variable for waiting callers.
///
/// `@unchecked Sendable`: every stored property is read and written only with `mutex` held, and
/// the mutex and condition are heap-allocated once and never moved.
final class PoolGate: @unchecked Sendable {
    enum Checkout {
        case connection(PGConnection)
        /// A slot is reserved: the caller opens a connection (outside the lock) or calls `openFailed`.
        case mayOpen
        case timedOut
        case closed
    }

    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private let limit: Int
    private var idle: [PGConnection] = []
    private var open = 0
    private var isClosed = false

    init(limit: Int) {
        self.limit = limit
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(cond, nil)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        cond.deallocate()
    }

    var openCount: Int {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return open
    }

    func checkout(timeoutMillis: Int) -> Checkout {
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        let ns = Int(deadline.tv_nsec) + (timeoutMillis % 1000) * 1_000_000
        deadline.tv_sec += timeoutMillis / 1000 + ns / 1_000_000_000
        deadline.tv_nsec = ns % 1_000_000_000
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while true {
            if isClosed { return .closed }
            if let c = idle.popLast() { return .connection(c) }
            if open < limit {
                open += 1
                return .mayOpen
            }
            if pthread_cond_timedwait(cond, mutex, &deadline) == ETIMEDOUT { return .timedOut }
        }
    }

    /// Counts an already open connection in and makes it idle.
    func adopt(_ c: PGConnection) {
        pthread_mutex_lock(mutex)
        open += 1
        pthread_mutex_unlock(mutex)
        returnConnection(c)
    }

    func openFailed() {
        pthread_mutex_lock(mutex)
        open -= 1
        pthread_cond_signal(cond)
        pthread_mutex_unlock(mutex)
    }

    /// Takes a connection back (a new one counts as open already): kept when it is healthy and
    /// idle, closed otherwise.
    func returnConnection(_ c: PGConnection) {
        pthread_mutex_lock(mutex)
        let keep = !isClosed && c.isUsable && c.isIdle
        if keep { idle.append(c) } else { open -= 1 }
        pthread_cond_signal(cond)
        pthread_mutex_unlock(mutex)
        if !keep { c.close() }
    }

    func close() {
        pthread_mutex_lock(mutex)
        isClosed = true
        let toClose = idle
        idle = []
        open -= toClose.count
        pthread_cond_broadcast(cond)
        pthread_mutex_unlock(mutex)
        for c in toClose { c.close() }
    }
}
