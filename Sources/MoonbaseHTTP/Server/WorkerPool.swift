import CMicroHTTPD
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A unit of work for the pool: `run` on a worker, or `cancel` if the pool stops first.
protocol WorkItem: AnyObject {
    func run(workerIndex: Int)
    func cancel()
}

/// N long-lived pthreads pulling jobs from one mutex+condvar FIFO.
///
/// Our own threads, not libdispatch: they unblock `SIGURG` (the Lua watchdog interrupts
/// workers with it) and live for the whole run, so `ThreadLocal` resources (a Lua VM, a SQLite
/// read connection) are created once per worker. A sleeping worker is signalled only when one
/// is idle, so a busy pool costs one lock round trip per job.
///
/// Thread-safety (`@unchecked Sendable`): `queue`, `stopping` and `idle` are only touched with
/// `mutex` held; `threads` is written before any worker can observe the pool and read only by
/// `stop()` (called once, serialised by `stopOnce`).
final class WorkerPool: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let cond: UnsafeMutablePointer<pthread_cond_t>
    private var queue = JobQueue()
    private var stopping = false
    private var idle = 0
    private var threads: [pthread_t] = []
    private let stopOnce = Atomic<Bool>(false)
    let maxQueued: Int
    let count: Int

    /// The worker index of the calling thread (nil off the pool). Shared by every pool: a
    /// thread belongs to at most one.
    static func currentIndex() -> Int? {
        guard let p = pthread_getspecific(indexKey) else { return nil }
        return Int(bitPattern: p) - 1
    }

    private static let indexKey: pthread_key_t = {
        var k = pthread_key_t()
        pthread_key_create(&k, nil)
        return k
    }()

    init(workers: Int, maxQueued: Int) throws(HTTPServerError) {
        count = max(1, workers)
        self.maxQueued = max(1, maxQueued)
        mutex = .allocate(capacity: 1)
        cond = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(cond, nil)
        _ = WorkerPool.indexKey
        for i in 0..<count {
            let ctx = Unmanaged.passRetained(WorkerContext(pool: self, index: i)).toOpaque()
            var tid = pthread_t()
            let rc = pthread_create(&tid, nil, workerMain, ctx)
            if rc != 0 {
                Unmanaged<WorkerContext>.fromOpaque(ctx).release()
                stop()
                throw HTTPServerError("cannot start worker thread (error \(rc))")
            }
            threads.append(tid)
        }
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    /// Queues a job; false when the pool is stopping or the queue is full (caller answers 503).
    func submit(_ job: any WorkItem) -> Bool {
        pthread_mutex_lock(mutex)
        if stopping || queue.count >= maxQueued {
            pthread_mutex_unlock(mutex)
            return false
        }
        queue.push(job)
        let wake = idle > 0
        pthread_mutex_unlock(mutex)
        if wake { pthread_cond_signal(cond) }
        return true
    }

    /// Jobs waiting for a worker (diagnostics).
    var queued: Int {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return queue.count
    }

    /// Stops accepting jobs, cancels those still queued, lets running jobs finish and joins
    /// every worker. Safe to call more than once.
    func stop() {
        guard !stopOnce.exchange(true, ordering: .acquiringAndReleasing) else { return }
        pthread_mutex_lock(mutex)
        stopping = true
        var cancelled: [any WorkItem] = []
        while let j = queue.pop() { cancelled.append(j) }
        pthread_mutex_unlock(mutex)
        pthread_cond_broadcast(cond)
        for j in cancelled { j.cancel() }
        for t in threads { pthread_join(t, nil) }
        threads.removeAll()
    }

    fileprivate func loop(index: Int) {
        _ = mb_unblock_signal(SIGURG)
        pthread_setspecific(WorkerPool.indexKey, UnsafeRawPointer(bitPattern: index + 1))
        while true {
            pthread_mutex_lock(mutex)
            while queue.count == 0 && !stopping {
                idle += 1
                pthread_cond_wait(cond, mutex)
                idle -= 1
            }
            guard let job = queue.pop() else {
                pthread_mutex_unlock(mutex)  // stopping and drained
                return
            }
            pthread_mutex_unlock(mutex)
            job.run(workerIndex: index)
        }
    }
}

/// Carries the pool and index into `pthread_create` (retained once, released by the thread).
private final class WorkerContext {
    let pool: WorkerPool
    let index: Int
    init(pool: WorkerPool, index: Int) {
        self.pool = pool
        self.index = index
    }
}

private let workerMain: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { raw in
    let ctx = Unmanaged<WorkerContext>.fromOpaque(raw!).takeRetainedValue()
    ctx.pool.loop(index: ctx.index)
    return nil
}

/// A growable ring buffer FIFO (no per-push allocation once warm).
private struct JobQueue {
    private var slots: [(any WorkItem)?] = Array(repeating: nil, count: 64)
    private var head = 0
    private(set) var count = 0

    mutating func push(_ j: any WorkItem) {
        if count == slots.count {
            var grown: [(any WorkItem)?] = Array(repeating: nil, count: slots.count * 2)
            for i in 0..<count { grown[i] = slots[(head + i) % slots.count] }
            slots = grown
            head = 0
        }
        slots[(head + count) % slots.count] = j
        count += 1
    }

    mutating func pop() -> (any WorkItem)? {
        guard count > 0 else { return nil }
        let j = slots[head]
        slots[head] = nil
        head = (head + 1) % slots.count
        count -= 1
        return j
    }
}
