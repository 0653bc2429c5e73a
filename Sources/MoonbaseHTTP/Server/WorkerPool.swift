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

/// N long-lived pthreads pulling jobs from one mutex-guarded FIFO.
///
/// Our own threads, not libdispatch: they unblock `SIGURG` (the Lua watchdog interrupts
/// workers with it) and live for the whole run, so `ThreadLocal` resources (a Lua VM, a SQLite
/// read connection) are created once per worker.
///
/// Waking is the expensive part of a hand-off (a futex wake on the I/O thread, a context switch
/// on the worker), so it is kept rare: an idle worker parks on its own futex word (no shared
/// condition variable), idle workers form a LIFO stack so the most recently idle one (still
/// spinning, or with a warm cache) is woken first, a job wakes a worker only when the queue
/// holds more jobs than workers already woken for it, and a parked worker spins for
/// `spinNanos` before sleeping in the kernel (waking a spinning worker costs one atomic
/// exchange). Jobs still start on any free worker, so a long job holds one worker only.
///
/// Thread-safety (`@unchecked Sendable`): `queue`, `stopping`, `idle` and `wakePending` are
/// only touched with `mutex` held; each parking word is written by its worker (arming, under
/// `mutex`) and by the waker through C atomics; `threads` is written before any worker can
/// observe the pool and read only by `stop()` (called once, serialised by `stopOnce`).
final class WorkerPool: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// One parking word per worker, each on its own cache line (16 words apart).
    private let words: UnsafeMutablePointer<UInt32>
    private static let wordStride = 16
    private var queue = JobQueue()
    private var stopping = false
    /// Parked workers, most recently parked last.
    private var idle: [Int] = []
    /// Workers taken off `idle` and woken that have not yet taken the lock again.
    private var wakePending = 0
    private var threads: [pthread_t] = []
    private let stopOnce = Atomic<Bool>(false)
    let maxQueued: Int
    let count: Int
    let spinNanos: UInt64

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

    init(workers: Int, maxQueued: Int, spinMicros: Int = 0) throws(HTTPServerError) {
        count = max(1, workers)
        self.maxQueued = max(1, maxQueued)
        spinNanos = UInt64(max(0, spinMicros)) * 1000
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        words = .allocate(capacity: count * WorkerPool.wordStride)
        words.initialize(repeating: 0, count: count * WorkerPool.wordStride)
        idle.reserveCapacity(count)
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
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        words.deallocate()
    }

    @inline(__always)
    private func word(_ i: Int) -> UnsafeMutablePointer<UInt32> { words + i * WorkerPool.wordStride }

    /// Queues a job; false when the pool is stopping or the queue is full (caller answers 503).
    func submit(_ job: any WorkItem) -> Bool {
        pthread_mutex_lock(mutex)
        if stopping || queue.count >= maxQueued {
            pthread_mutex_unlock(mutex)
            return false
        }
        queue.push(job)
        var wake = -1
        if queue.count > wakePending, let w = idle.popLast() {
            wake = w
            wakePending += 1
        }
        pthread_mutex_unlock(mutex)
        if wake >= 0 { mb_parker_wake(word(wake)) }
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
        let parked = idle
        wakePending += parked.count
        idle.removeAll()
        pthread_mutex_unlock(mutex)
        for w in parked { mb_parker_wake(word(w)) }
        for j in cancelled { j.cancel() }
        for t in threads { pthread_join(t, nil) }
        threads.removeAll()
    }

    fileprivate func loop(index: Int) {
        _ = mb_unblock_signal(SIGURG)
        pthread_setspecific(WorkerPool.indexKey, UnsafeRawPointer(bitPattern: index + 1))
        let w = word(index)
        pthread_mutex_lock(mutex)
        while true {
            if let job = queue.pop() {
                pthread_mutex_unlock(mutex)
                job.run(workerIndex: index)
                pthread_mutex_lock(mutex)
                continue
            }
            if stopping {
                pthread_mutex_unlock(mutex)  // stopping and drained
                return
            }
            mb_parker_arm(w)
            idle.append(index)
            pthread_mutex_unlock(mutex)
            mb_parker_wait(w, spinNanos)
            pthread_mutex_lock(mutex)
            // Only a waker (submit or stop) takes us off `idle`, counting us in `wakePending`.
            wakePending -= 1
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
