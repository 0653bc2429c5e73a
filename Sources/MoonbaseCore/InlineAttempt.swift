#if canImport(Glibc)
import Glibc
#endif

/// A request started on an HTTP I/O thread must never wait there: every connection of that
/// thread would wait with it. Work that would have to wait (the database writer held by a long
/// transaction, a checkpoint due, a trigger to run) throws `continuesOnWorker` instead; the
/// request's start is undone (its transaction rolls back, its quota unit is given back, nothing
/// is logged) and a worker runs the request from the beginning.
///
/// A read (a REST find or get) may also run out of time: it is attempted under a budget
/// (`running(readBudgetNanos:)`), SQLite's progress handler on every read connection asks
/// `progressCheck` every few thousand virtual-machine steps, and once the budget is spent the
/// statement is interrupted and `expired` turns true. Whatever the read computed is then thrown
/// away and a worker runs it again: a read has nothing to undo, which is why only reads get a
/// budget (a write attempt must not be cut short after its commit).
public enum InlineAttempt {
    /// The state of the attempt running on this thread, pointed to by `key` while it runs.
    struct State {
        /// Monotonic nanoseconds after which the thread's CPU time is looked at; 0: no budget.
        var deadline: UInt64
        /// The thread's CPU time when the attempt began, and the budget.
        var cpuStart: UInt64
        var budget: UInt64
        var expired: Bool
        /// A write behind a short one may wait for it (about a millisecond at most) rather than
        /// give up the attempt (see `mayWaitForWriter`).
        var writerWait: Bool
    }

    private static let key: pthread_key_t = {
        var k = pthread_key_t()
        pthread_key_create(&k, nil)
        return k
    }()

    /// True on an I/O thread running a request's start.
    public static var active: Bool { pthread_getspecific(key) != nil }

    /// True when the attempt running on this thread is a read under a budget (`running`).
    public static var hasReadBudget: Bool {
        guard let p = pthread_getspecific(key) else { return false }
        return p.assumingMemoryBound(to: State.self).pointee.deadline != 0
    }

    /// True once the read budget of the attempt running on this thread was spent: its answer
    /// must not be used; a worker runs the request again.
    public static var expired: Bool {
        guard let p = pthread_getspecific(key) else { return false }
        return p.assumingMemoryBound(to: State.self).pointee.expired
    }

    /// False when the attempt running on this thread has somewhere better to go than a wait
    /// for the writer, however short (a REST write joins a batch, see `running`).
    public static var mayWaitForWriter: Bool {
        guard let p = pthread_getspecific(key) else { return true }
        return p.assumingMemoryBound(to: State.self).pointee.writerWait
    }

    /// Runs `body` as a request's start on an I/O thread (`active` is true inside). With
    /// `readBudgetNanos` > 0 the request only reads, and its reads are interrupted once the
    /// thread has spent that much CPU time on it (see `expired`). With `writerWait` false a
    /// write gives up the attempt whenever the writer is held (see `mayWaitForWriter`).
    public static func running<T>(readBudgetNanos: UInt64 = 0, writerWait: Bool = true, _ body: () -> T) -> T {
        var state = State(deadline: 0, cpuStart: 0, budget: readBudgetNanos, expired: false, writerWait: writerWait)
        if readBudgetNanos != 0 {
            state.deadline = monotonicNanos() &+ readBudgetNanos
            state.cpuStart = threadCPUNanos()
        }
        return withUnsafeMutablePointer(to: &state) { p in
            pthread_setspecific(key, UnsafeRawPointer(p))
            defer { pthread_setspecific(key, nil) }
            return body()
        }
    }

    /// For SQLite's progress handler on read connections: 1 (interrupt the statement) when this
    /// thread runs a read attempt whose budget is spent, else 0. A few nanoseconds off attempts.
    public static func progressCheck() -> Int32 {
        guard let p = pthread_getspecific(key) else { return 0 }
        let s = p.assumingMemoryBound(to: State.self)
        guard s.pointee.deadline != 0 else { return 0 }
        if s.pointee.expired { return 1 }
        let now = monotonicNanos()
        guard now > s.pointee.deadline else { return 0 }
        // The budget is CPU time: a thread preempted mid-read (the machine busy) has not made
        // its other connections wait for its own work, and its read would be done twice. The
        // wall clock (cheap) says when the CPU clock (a system call) is worth reading.
        let used = threadCPUNanos() &- s.pointee.cpuStart
        if used < s.pointee.budget {
            s.pointee.deadline = now &+ (s.pointee.budget - used)
            return 0
        }
        s.pointee.expired = true
        return 1
    }

    /// Thrown by work that cannot finish on an I/O thread without waiting.
    public static let continuesOnWorker = ParseError(.internalError, "the request continues on a worker",
                                                     underlying: marker)
    static let marker = "attempt: continues on a worker"

    /// True for `continuesOnWorker`.
    public static func isContinuesOnWorker(_ e: ParseError) -> Bool { e.underlying == marker }
}
