import CHTTPGuard
import CMicroHTTPD
import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A unit of work for the pool: `run` on a worker, `cancel` if the pool stops first, or
/// `abandon` if its worker does not return in time (then `run`'s late result is dropped).
protocol WorkItem: AnyObject {
    func run(workerIndex: Int)
    func cancel()
    func abandon(shuttingDown: Bool)
    /// Runs on the CPU from start to end (a local read: no sleep, no lock held by a writer), so
    /// running more of these at once than there are cores only slices the cores between them
    /// (see `WorkerPool.cpuSlots`).
    var cpuBound: Bool { get }
    /// May the monitor lower its thread's priority once it counts as a long job spinning (see
    /// `WorkerPool.demoteLongJobs`)? False for work known to be useful however long it runs
    /// (a batch of writes, `BatchJob`).
    var demotable: Bool { get }
}

extension WorkItem {
    var cpuBound: Bool { false }
    var demotable: Bool { true }
}

/// What the pool reports to `/parse/health` and `/metrics`.
struct PoolStatus: Sendable {
    /// Live workers (not counting abandoned ones).
    var workers: Int
    /// Live workers running a job.
    var busy: Int
    /// Abandoned threads still running their stuck job.
    var stuck: Int
    var queued: Int
    /// Every live worker has been on its current job for longer than the saturation window:
    /// no new request can start.
    var saturated: Bool
}

/// N long-lived pthreads pulling jobs from one mutex-guarded FIFO, with a backstop for
/// workers that never return.
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
/// Growth and priority (when `maxWorkers` > `workers`): a job that has run `longJobNanos` is
/// long, and the monitor watches what its thread does (`demoteLongJobs`): spinning (it has used
/// `spinCPUNanos` of CPU since), waiting on something else (asleep most of the time), or sharing
/// a saturated CPU. While every worker runs a long job that spins or waits and jobs are queued,
/// the monitor starts an extra worker (up to `maxLive`; extras exit after `extraIdleNanos`
/// idle), and it lowers the CPU priority of each spinning one (nice `longJobNice`, that thread
/// only), so that on a busy CPU the
/// short requests of the extra workers and the I/O threads go first: with as many scripts
/// spinning as there are workers and the cores all taken, a spinner at nice 0 could hold a
/// woken request thread off the CPU for a whole scheduler slice at each of its hand-offs. After
/// its long job the worker goes back to nice 0; where the process may not lower a nice value
/// again (unprivileged, RLIMIT_NICE 0) the thread leaves instead and a fresh one takes its place,
/// so a short request never runs on a demoted thread.
///
/// CPU-bound jobs (`cpuSlots` > 0): at most `cpuSlots` jobs marked `cpuBound` (local REST reads)
/// run at once, one per core; the others wait in the queue, where other jobs pass them. With
/// more workers than cores (the default is two per core, so that calls that sleep — Lua waiting
/// on the writer or an outbound call — leave the cores busy), reads taken by every worker
/// time-slice two cores four ways, and the kernel's preemption puts a whole scheduler slice into
/// some of them: W5 (a geo read of ~0.4 ms CPU, eight connections on two cores) measured p99
/// 4.1–6.0 ms so against 3.2–3.6 ms with one worker per core. A worker finishing a read takes
/// the next queued one itself (no hand-off, no wake-up). A read that runs past
/// `cpuHoldNanos` (a slow scan) stops counting, and the monitor wakes a worker for the reads
/// behind it: a slot is never held longer than that plus a tick.
///
/// Backstop: each job gets a deadline (`jobLimitNanos` from its start, raised by
/// `JobWatch.noteLimit` for calls with a longer limit). A monitor thread checks a few times a
/// second; a worker past its deadline plus `graceNanos` is stuck: its request is answered
/// (124 timeout), the thread is abandoned (it exits if it ever returns) and a replacement
/// starts, so capacity recovers. At most `count` threads may be abandoned at once; past that
/// no replacement starts and the pool reports itself saturated.
///
/// Thread-safety (`@unchecked Sendable`): `queue`, `stopping`, `idle`, `wakePending`,
/// `running`, `abandoned`, `freeIndices`, `live`, `stuckCount` and `threads` are only touched
/// with `mutex` held; each parking word is written by its worker (arming, under `mutex`) and by
/// the waker through C atomics; job slots are atomics.
final class WorkerPool: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// One parking word per worker index, each on its own cache line (16 words apart).
    private let words: UnsafeMutablePointer<UInt32>
    private static let wordStride = 16
    private var queue = JobQueue()
    private var stopping = false
    /// Parked workers, most recently parked last.
    private var idle: [Int] = []
    /// Workers taken off `idle` and woken for the queue that have not yet taken the lock again
    /// (not those handed a job of their own by `submit(_:to:)`).
    private var wakePending = 0
    /// Thread handle per index (nil = index free).
    private var threads: [pthread_t?]
    /// The job each index is running.
    private var running: [(any WorkItem)?]
    /// A job handed to one worker in particular (an attempt it must finish), run before the queue.
    private var direct: [(any WorkItem)?]
    /// Each index's seat (`WorkerSeat`): a number unique to the thread running there.
    private var seats: [Int]
    private var nextSeat = 0
    /// Workers started past `count` because every worker was busy on a long job (see
    /// `growIfStarved`); retired after `extraIdleNanos` idle.
    private var extra: [Bool]
    /// When each index last parked (monotonic ns).
    private var idleSince: [UInt64]
    /// Set on an extra worker woken to exit.
    private var retire: [Bool]
    /// Indices whose thread was abandoned and still runs its stuck job.
    private var abandoned: [Bool]
    /// Base workers that left after a long job (priority not restorable) and that the monitor
    /// has yet to replace.
    private var owedWorkers = 0
    /// Kernel thread id of the thread at each index (for its nice value).
    private var tids: [Int32]
    /// Indices whose thread runs at `longJobNice` (set and cleared with `mutex` held).
    private var demoted: [Bool]
    /// Per index: how the monitor sees the long job running there (monitor thread only, mutex
    /// held).
    private var watch: [LongJob]
    private var freeIndices: [Int] = []
    private var live = 0
    private var stuckCount = 0
    private let slots: [JobSlot]
    /// Per index: the job running there is `cpuBound` (see `cpuSlots`).
    private var cpuJob: [Bool]
    /// `cpuBound` jobs in `queue`.
    private var queuedCPU = 0
    /// CPU-bound jobs that may run at once (0 = no limit).
    let cpuSlots: Int
    /// A CPU-bound job stops counting toward `cpuSlots` once it has run this long.
    let cpuHoldNanos: UInt64
    private let stopOnce = Atomic<Bool>(false)
    private let monitorRunning = Atomic<Bool>(false)
    private var monitor: pthread_t?
    let maxQueued: Int
    let count: Int
    let spinNanos: UInt64
    let jobLimitNanos: UInt64
    let graceNanos: UInt64
    /// Workers replaced since start (diagnostics, metrics).
    let replaced = Atomic<Int>(0)
    /// `cpuBound` jobs queued while every CPU slot was taken (metrics).
    let waitedForSlot = Atomic<Int>(0)
    /// Set by the monitor: some worker runs a long call found spinning or waiting.
    private let longJobsRunning = Atomic<Bool>(false)
    /// A worker busy this long on one job counts toward saturation.
    static let saturationNanos: UInt64 = 1_000_000_000
    /// A job running this long is long: when every worker runs one and jobs wait, the pool
    /// starts another worker (up to `maxLive`), so slow or spinning scripts hold their own
    /// workers and the requests behind them start within a few milliseconds.
    static let longJobNanos: UInt64 = 3_000_000
    /// An extra worker idle this long exits (2 s unless a test sets it).
    let extraIdleNanos: UInt64
    /// Live workers at most (`count` when the pool does not grow).
    let maxLive: Int
    /// The nice value of a worker on a long job (growing pools only).
    static let longJobNice: Int32 = 10
    /// CPU time on one long job past which it counts as spinning (a short call uses ~0.1 ms).
    static let spinCPUNanos: UInt64 = 1_000_000
    /// The calling thread's nice value (tests, diagnostics).
    static func currentThreadNice() -> Int32 { Int32(mb_thread_nice()) }

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

    /// - Parameters:
    ///   - jobLimitMillis: a job's default time limit (0 = no backstop).
    ///   - graceMillis: how long past its limit a worker may run before it is replaced.
    ///   - maxWorkers: live workers at most, extra ones included (0 or ≤ workers: no growth).
    ///   - extraIdleMillis: how long an extra worker stays parked before it exits.
    ///   - cpuSlots: `cpuBound` jobs running at once at most (0 = no limit; see the type).
    ///   - cpuHoldMicros: how long a `cpuBound` job counts toward `cpuSlots`.
    init(workers: Int, maxQueued: Int, spinMicros: Int = 0, jobLimitMillis: Int = 0,
         graceMillis: Int = 5_000, maxWorkers: Int = 0, extraIdleMillis: Int = 2_000,
         cpuSlots: Int = 0, cpuHoldMicros: Int = 5_000) throws(HTTPServerError) {
        self.cpuSlots = max(0, cpuSlots)
        cpuHoldNanos = UInt64(max(1, cpuHoldMicros)) * 1000
        extraIdleNanos = UInt64(max(1, extraIdleMillis)) * 1_000_000
        count = max(1, workers)
        self.maxQueued = max(1, maxQueued)
        spinNanos = UInt64(max(0, spinMicros)) * 1000
        jobLimitNanos = UInt64(max(0, jobLimitMillis)) * 1_000_000
        graceNanos = UInt64(max(0, graceMillis)) * 1_000_000
        maxLive = max(count, maxWorkers)
        // Live workers (at most maxLive) plus abandoned stuck ones (at most count).
        let capacity = maxLive + count
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        words = .allocate(capacity: capacity * WorkerPool.wordStride)
        words.initialize(repeating: 0, count: capacity * WorkerPool.wordStride)
        threads = Array(repeating: nil, count: capacity)
        running = Array(repeating: nil, count: capacity)
        direct = Array(repeating: nil, count: capacity)
        seats = Array(repeating: -1, count: capacity)
        extra = Array(repeating: false, count: capacity)
        idleSince = Array(repeating: 0, count: capacity)
        retire = Array(repeating: false, count: capacity)
        abandoned = Array(repeating: false, count: capacity)
        tids = Array(repeating: 0, count: capacity)
        demoted = Array(repeating: false, count: capacity)
        watch = Array(repeating: LongJob(), count: capacity)
        slots = (0..<capacity).map { _ in JobSlot() }
        cpuJob = Array(repeating: false, count: capacity)
        freeIndices = Array((count..<capacity).reversed())
        idle.reserveCapacity(capacity)
        _ = WorkerPool.indexKey
        pthread_mutex_lock(mutex)
        for i in 0..<count {
            if let err = spawn(index: i) {
                pthread_mutex_unlock(mutex)
                stop()
                throw HTTPServerError("cannot start worker thread (error \(err))")
            }
        }
        pthread_mutex_unlock(mutex)
        if jobLimitNanos > 0 || maxLive > count || self.cpuSlots > 0 { startMonitor() }
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        words.deallocate()
    }

    /// Starts a worker thread on `index` (mutex held). Returns the error code on failure.
    private func spawn(index: Int) -> Int32? {
        nextSeat += 1
        seats[index] = nextSeat
        let ctx = Unmanaged.passRetained(WorkerContext(pool: self, index: index, seat: nextSeat)).toOpaque()
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, workerMain, ctx)
        if rc != 0 {
            Unmanaged<WorkerContext>.fromOpaque(ctx).release()
            return rc
        }
        threads[index] = tid
        live += 1
        return nil
    }

    @inline(__always)
    private func word(_ i: Int) -> UnsafeMutablePointer<UInt32> { words + i * WorkerPool.wordStride }

    // MARK: CPU slots (mutex held)

    /// `cpuBound` jobs running that still count toward `cpuSlots`.
    private func cpuBusy(_ now: UInt64) -> Int {
        var n = 0
        for i in 0..<cpuJob.count where cpuJob[i] && !abandoned[i] {
            let t = slots[i].startedAt.load(ordering: .relaxed)
            if t != 0 && now &- t < cpuHoldNanos { n += 1 }
        }
        return n
    }

    /// Queued jobs a worker could start now.
    private func runnableQueued(_ now: UInt64) -> Int {
        guard cpuSlots > 0, queuedCPU > 0 else { return queue.count }
        return queue.count - queuedCPU + min(queuedCPU, max(0, cpuSlots - cpuBusy(now)))
    }

    /// The next job a worker may start: the oldest, unless it is `cpuBound` and every CPU slot
    /// is taken, in which case the oldest job that is not.
    private func take(now: UInt64) -> (any WorkItem)? {
        guard queue.count > 0 else { return nil }
        guard cpuSlots > 0, queuedCPU > 0 else { return queue.pop() }
        let job = cpuBusy(now) < cpuSlots ? queue.pop() : queue.removeFirst { !$0.cpuBound }
        if let job, job.cpuBound { queuedCPU -= 1 }
        return job
    }

    /// Wakes parked workers for queued `cpuBound` jobs whose slots came free without a worker
    /// finishing one (a slot held past `cpuHoldNanos`; monitor thread). Returns who to wake.
    private func wakeForFreedSlots(now: UInt64) -> [Int] {
        guard cpuSlots > 0, queuedCPU > 0 else { return [] }
        var out: [Int] = []
        while runnableQueued(now) > wakePending, let w = idle.popLast() {
            wakePending += 1
            out.append(w)
        }
        return out
    }

    /// Whether `stop` has begun: from here on every job offered is refused.
    var isStopping: Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return stopping
    }

    /// Queues a job; false when the pool is stopping or the queue is full (caller answers 503).
    func submit(_ job: any WorkItem) -> Bool {
        pthread_mutex_lock(mutex)
        if stopping || queue.count >= maxQueued {
            pthread_mutex_unlock(mutex)
            return false
        }
        queue.push(job)
        var wake = -1
        let now = monotonicNanos()
        if cpuSlots > 0 && job.cpuBound {
            queuedCPU += 1
            if cpuBusy(now) >= cpuSlots { waitedForSlot.add(1, ordering: .relaxed) }
        }
        // A CPU-bound job that must wait for a slot wakes nobody (`runnableQueued` leaves it
        // out): the worker that frees the slot takes it, or the monitor wakes one for a slot
        // held too long.
        if runnableQueued(now) > wakePending, let w = idle.popLast() {
            wake = w
            wakePending += 1
        } else {
            growIfStarved(now: now)
        }
        pthread_mutex_unlock(mutex)
        if wake >= 0 { mb_parker_wake(word(wake)) }
        return true
    }

    /// Takes a parked worker off the idle list without waking it, for the caller to run work
    /// on its seat (`WorkerSeat.borrowing`); nil when none is idle or jobs are waiting. The
    /// worker stays parked and takes no job until `release` or `submit(_:to:)`.
    func reserveIdle() -> (index: Int, seat: Int)? {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        guard !stopping, queue.count == 0, let w = idle.popLast() else { return nil }
        return (w, seats[w])
    }

    /// Gives back a worker reserved by `reserveIdle`: parked again, or woken if jobs arrived
    /// meanwhile (or the pool is stopping).
    func release(_ index: Int) {
        pthread_mutex_lock(mutex)
        let wake = stopping || runnableQueued(monotonicNanos()) > wakePending
        if wake { wakePending += 1 } else { idle.append(index) }
        pthread_mutex_unlock(mutex)
        if wake { mb_parker_wake(word(index)) }
    }

    /// Hands `job` to the worker reserved by `reserveIdle` and wakes it (it runs the job even if
    /// the pool began stopping: the job finishes what the reservation started).
    ///
    /// Not counted in `wakePending`: that count is of workers on their way to the queue, and this
    /// one is on its way to its own job. Counted, it made a job queued in that instant look
    /// served: `submit` woke no idle worker and the pool did not grow, so the job waited until
    /// some worker finished (a REST read queued beside Lua calls handed over here waited for a
    /// 300 ms spin to end, 258–278 ms, in about half of the I1 runs).
    func submit(_ job: any WorkItem, to index: Int) {
        pthread_mutex_lock(mutex)
        direct[index] = job
        pthread_mutex_unlock(mutex)
        mb_parker_wake(word(index))
    }

    /// Whether a worker runs a long call the monitor found spinning or waiting (growing pools
    /// only; see `demoteLongJobs`). A short request queued now may wait for the pool to grow
    /// past such calls, a few milliseconds or, when it is at its cap, until one ends.
    var holdsLongJobs: Bool { longJobsRunning.load(ordering: .relaxed) }

    /// Jobs waiting for a worker (diagnostics).
    var queued: Int {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return queue.count
    }

    /// Counts for health and metrics.
    func status() -> PoolStatus {
        let now = monotonicNanos()
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        var busy = 0
        var longBusy = 0
        for i in 0..<threads.count where threads[i] != nil && !abandoned[i] && running[i] != nil {
            busy += 1
            let t = slots[i].startedAt.load(ordering: .relaxed)
            if t != 0 && now > t + WorkerPool.saturationNanos { longBusy += 1 }
        }
        return PoolStatus(workers: live, busy: busy, stuck: stuckCount, queued: queue.count,
                          saturated: live == 0 || longBusy == live)
    }

    /// Stops accepting jobs, cancels those still queued and waits for running jobs until
    /// `deadlineNanos` (monotonic) or their own time limit, whichever is later; jobs still
    /// running then are abandoned (answered 503, their threads detached). Returns the number of threads left running (stuck or abandoned).
    /// Safe to call more than once.
    @discardableResult
    func stop(deadlineNanos: UInt64 = .max) -> Int {
        guard !stopOnce.exchange(true, ordering: .acquiringAndReleasing) else { return 0 }
        stopMonitor()
        pthread_mutex_lock(mutex)
        stopping = true
        var cancelled: [any WorkItem] = []
        while let j = queue.pop() { cancelled.append(j) }
        queuedCPU = 0
        let parked = idle
        wakePending += parked.count
        idle.removeAll()
        pthread_mutex_unlock(mutex)
        for w in parked { mb_parker_wake(word(w)) }
        for j in cancelled { j.cancel() }
        // Wait for running jobs until the deadline, or until their own time limit if that is
        // later (a handler within its limit is let finish; one past both is abandoned).
        while true {
            let now = monotonicNanos()
            pthread_mutex_lock(mutex)
            let waiting = (0..<threads.count).contains { i in
                guard threads[i] != nil, !abandoned[i], running[i] != nil else { return false }
                let own = slots[i].deadline.load(ordering: .relaxed)
                return now < max(deadlineNanos, own == .max ? deadlineNanos : own)
            }
            pthread_mutex_unlock(mutex)
            if !waiting { break }
            usleep(2_000)
        }
        pthread_mutex_lock(mutex)
        var late: [any WorkItem] = []
        var toJoin: [pthread_t] = []
        for i in 0..<threads.count {
            guard let t = threads[i] else { continue }
            if abandoned[i] { continue }
            if let j = running[i] {
                abandoned[i] = true
                stuckCount += 1
                late.append(j)
                pthread_detach(t)
            } else {
                toJoin.append(t)
            }
        }
        let left = stuckCount
        pthread_mutex_unlock(mutex)
        for j in late { j.abandon(shuttingDown: true) }
        for t in toJoin { pthread_join(t, nil) }
        return left
    }

    fileprivate func loop(index: Int, seat: Int) {
        _ = mb_unblock_signal(SIGURG)
        pthread_setspecific(WorkerPool.indexKey, UnsafeRawPointer(bitPattern: index + 1))
        WorkerSeat.setOwn(seat)
        let slot = slots[index]
        JobWatch.bind(slot)
        let w = word(index)
        pthread_mutex_lock(mutex)
        tids[index] = mb_gettid()
        while true {
            if retire[index] && !stopping {
                retire[index] = false
                // An extra worker idle for long leaves (the monitor took it off `idle`), unless a
                // job arrived meanwhile that no other woken worker will take: the monitor counted
                // this worker in `wakePending` when it chose to retire it, so `submit` saw a
                // worker on its way and woke nobody. Leaving then would strand that job in the
                // queue with idle workers parked until the next submit (a lost wake-up, seen as a
                // request unanswered for 30 s while the pool shrank after a burst). While stopping
                // it stays to be joined instead.
                if runnableQueued(monotonicNanos()) <= wakePending {
                    live -= 1
                    vacate(index)
                    pthread_mutex_unlock(mutex)
                    pthread_detach(pthread_self())
                    return
                }
            }
            let handed = direct[index]
            if handed != nil { direct[index] = nil }
            let now = monotonicNanos()
            if let job = handed ?? take(now: now) {
                running[index] = job
                cpuJob[index] = cpuSlots > 0 && job.cpuBound
                slot.startedAt.store(now, ordering: .relaxed)
                slot.deadline.store(jobLimitNanos > 0 ? now + jobLimitNanos : .max, ordering: .relaxed)
                pthread_mutex_unlock(mutex)
                job.run(workerIndex: index)
                pthread_mutex_lock(mutex)
                running[index] = nil
                cpuJob[index] = false
                slot.deadline.store(0, ordering: .relaxed)
                slot.startedAt.store(0, ordering: .relaxed)
                if abandoned[index] {
                    // Replaced while stuck: give the index back and leave.
                    abandoned[index] = false
                    stuckCount -= 1
                    vacate(index)
                    pthread_mutex_unlock(mutex)
                    Log.warn("worker \(index): a job abandoned as stuck finally returned; its thread exits")
                    return
                }
                if demoted[index] {
                    demoted[index] = false
                    if mb_set_thread_nice(tids[index], 0) != 0 {
                        // Not allowed to raise our priority again: leave. A base worker is owed a
                        // replacement, which the monitor starts: a thread inherits its creator's
                        // nice value, so this thread must not create it (an extra worker is simply
                        // not replaced).
                        if !extra[index] { owedWorkers += 1 }
                        live -= 1
                        vacate(index)
                        pthread_mutex_unlock(mutex)
                        pthread_detach(pthread_self())
                        return
                    }
                }
                continue
            }
            if stopping {
                pthread_mutex_unlock(mutex)  // stopping and drained
                return
            }
            mb_parker_arm(w)
            idleSince[index] = monotonicNanos()
            idle.append(index)
            pthread_mutex_unlock(mutex)
            mb_parker_wait(w, spinNanos)
            pthread_mutex_lock(mutex)
            // Only a waker takes us off `idle`: `submit`, `stop`, the monitor retiring us or
            // `release` count us in `wakePending`; `submit(_:to:)` hands us a job instead.
            if direct[index] == nil { wakePending -= 1 }
        }
    }

    /// Gives `index` back for a later worker: its thread is leaving (mutex held).
    private func vacate(_ index: Int) {
        extra[index] = false
        demoted[index] = false
        tids[index] = 0
        threads[index] = nil
        freeIndices.append(index)
    }

    // MARK: Backstop

    private func startMonitor() {
        monitorRunning.store(true, ordering: .releasing)
        let ctx = Unmanaged.passRetained(WorkerContext(pool: self, index: -1)).toOpaque()
        var tid = pthread_t()
        if pthread_create(&tid, nil, monitorMain, ctx) == 0 {
            monitor = tid
        } else {
            Unmanaged<WorkerContext>.fromOpaque(ctx).release()
            monitorRunning.store(false, ordering: .releasing)
            Log.warn("worker pool: cannot start the stuck-worker monitor")
        }
    }

    private func stopMonitor() {
        guard monitorRunning.exchange(false, ordering: .acquiringAndReleasing), let m = monitor else { return }
        pthread_join(m, nil)
        monitor = nil
    }

    fileprivate func monitorLoop() {
        // Growth and CPU slots need a fast look (a request waits at most about this long for a
        // new worker or a freed slot); the stuck check and a fixed pool's long-call look run
        // every 100 ms either way.
        let grows = maxLive > count
        let fast = grows || cpuSlots > 0
        let sleepMicros: UInt32 = fast ? 2_000 : 100_000
        let every100ms = fast ? 50 : 1
        var tick = 0
        while monitorRunning.load(ordering: .acquiring) {
            usleep(sleepMicros)
            tick += 1
            let slow = tick % every100ms == 0
            pthread_mutex_lock(mutex)
            let now = monotonicNanos()
            var toWake = wakeForFreedSlots(now: now)
            if grows {
                replaceOwedWorkers()
                growIfStarved(now: now)
                demoteLongJobs(now: now)
                longJobsRunning.store(anyLongJob(now: now), ordering: .relaxed)
                toWake += retireIdleExtras(now: now)
            } else if slow {
                // A fixed pool sorts no job; it holds long calls when every worker has been on
                // its job for `heldByLongJobNanos`.
                longJobsRunning.store(everyWorkerOnALongJob(now: now), ordering: .relaxed)
            }
            pthread_mutex_unlock(mutex)
            for w in toWake { mb_parker_wake(word(w)) }
            if jobLimitNanos > 0 && slow { checkStuck() }
        }
    }

    /// A job on its worker this long, and found spinning or waiting, makes the pool hold long
    /// calls (`holdsLongJobs`). Far above `longJobNanos`: a heavy query slowed by busy cores
    /// (W5, about 1 ms of CPU, sometimes several ms on the clock) must not turn it on, or reads
    /// would move to the I/O threads just when those are busy, take longer there, be cut short
    /// and run twice, and keep it on (measured so at 3 ms: W5's p99 24 → 209–253 ms). Scripts
    /// stuck at their limits (hundreds of ms) are past it almost all the time.
    static let heldByLongJobNanos: UInt64 = 50_000_000

    /// Whether a worker has run one job for `heldByLongJobNanos` that the monitor found spinning
    /// or waiting (mutex held).
    private func anyLongJob(now: UInt64) -> Bool {
        for i in 0..<threads.count where threads[i] != nil && !abandoned[i] && running[i] != nil {
            let t = slots[i].startedAt.load(ordering: .relaxed)
            guard t != 0, now > t &+ WorkerPool.heldByLongJobNanos else { continue }
            if watch[i].job == t && (watch[i].kind == .spinning || watch[i].kind == .waiting) { return true }
        }
        return false
    }

    /// Whether every live worker has been on its job for `heldByLongJobNanos` (mutex held).
    private func everyWorkerOnALongJob(now: UInt64) -> Bool {
        var any = false
        for i in 0..<threads.count where threads[i] != nil && !abandoned[i] {
            let t = slots[i].startedAt.load(ordering: .relaxed)
            guard running[i] != nil, t != 0, now > t &+ WorkerPool.heldByLongJobNanos else { return false }
            any = true
        }
        return any
    }

    /// Starts the base workers owed after demoted threads left (monitor thread, mutex held).
    private func replaceOwedWorkers() {
        while owedWorkers > 0 && !stopping, let fresh = freeIndices.popLast() {
            if spawn(index: fresh) != nil {
                freeIndices.append(fresh)
                return
            }
            owedWorkers -= 1
        }
    }

    /// Whether the calling thread is a worker running at the lowered priority (a thread it
    /// created would inherit that nice value).
    private func callerIsDemoted() -> Bool {
        guard let i = WorkerPool.currentIndex(), i < demoted.count else { return false }
        return demoted[i]
    }

    /// Starts an extra worker when jobs wait and every live worker has been on its job for
    /// `longJobNanos` (mutex held). Workers just woken or reserved count as soon free. Never
    /// from a demoted worker (the monitor grows the pool instead, within a tick).
    private func growIfStarved(now: UInt64) {
        guard !stopping, live < maxLive, runnableQueued(now) > wakePending, idle.isEmpty, !callerIsDemoted() else { return }
        for i in 0..<threads.count where threads[i] != nil && !abandoned[i] {
            let t = slots[i].startedAt.load(ordering: .relaxed)
            guard running[i] != nil, t != 0, now > t &+ WorkerPool.longJobNanos else { return }
            // Only a job the monitor found spinning or waiting (not one merely queued for a
            // saturated CPU: another thread would not make it go faster).
            guard watch[i].job == t, watch[i].kind == .spinning || watch[i].kind == .waiting else { return }
        }
        guard let fresh = freeIndices.popLast() else { return }
        if spawn(index: fresh) != nil {
            freeIndices.append(fresh)
            return
        }
        extra[fresh] = true
    }

    /// Sorts each long job by what its thread did since the monitor first saw it long, and
    /// lowers the priority of the spinning ones (mutex held, so the worker cannot finish the job
    /// and run a short one between the check and the call).
    ///
    /// A job past `longJobNanos` on the clock gets its thread's scheduler counters read as a
    /// baseline (time on a CPU, time runnable but waiting for one); from then on:
    /// - **spinning** once it has run `spinCPUNanos` on a CPU since: it is demoted, and the pool
    ///   may grow past it. Counted in CPU time, not as a share of the wall clock: four scripts
    ///   spinning on two busy cores each get well under half a CPU, yet each piles up
    ///   milliseconds, while a short call waiting its turn on a saturated CPU uses only its own
    ///   ~100 µs however long it waits. Once spinning, always spinning (no more reads).
    /// - **waiting** when, after another `longJobNanos`, it spent at most a quarter of that time
    ///   on a CPU or queued for one and is not runnable now: it sleeps on something else (an
    ///   outbound HTTP call, the writer lock), so another worker can use the CPU meanwhile and
    ///   the pool may grow. (The kernel adds a wait for a CPU to the counters only when the
    ///   thread gets one: a thread queued all along looks idle by them, but runnable by state.)
    /// - otherwise **sharing** a saturated CPU with other runnable threads: neither, since
    ///   another thread would not make anything faster. Growing and demoting for those fed on
    ///   itself: under a load of short calls on busy cores every call takes milliseconds, and W1
    ///   with 10 reads per call went from 80 to 130–600 µs of CPU per request within a minute.
    ///   Looked at again `longJobNanos` later.
    private func demoteLongJobs(now: UInt64) {
        for i in 0..<threads.count where threads[i] != nil && !abandoned[i] && running[i]?.demotable == true {
            let t = slots[i].startedAt.load(ordering: .relaxed)
            guard t != 0, now > t &+ WorkerPool.longJobNanos, tids[i] != 0 else { continue }
            if watch[i].job == t && (watch[i].kind == .spinning || now < watch[i].nextLook) { continue }
            guard let times = threadTimes(i) else { continue }
            if watch[i].job != t {
                watch[i] = LongJob(job: t, ran: times.ran, queued: times.queued, since: now, nextLook: now, kind: .unknown)
                continue
            }
            let wall = now &- watch[i].since
            let ran = times.ran &- watch[i].ran
            if ran >= WorkerPool.spinCPUNanos {
                watch[i].kind = .spinning
                if !demoted[i] && mb_set_thread_nice(tids[i], WorkerPool.longJobNice) == 0 { demoted[i] = true }
            } else if wall >= WorkerPool.longJobNanos, let queued = times.queued {
                let busy = ran &+ (queued &- (watch[i].queued ?? queued))
                let asleep = busy * 4 <= wall && mb_thread_state(tids[i]) != UInt8(ascii: "R")
                watch[i].kind = asleep ? .waiting : .sharing
                if watch[i].kind == .sharing { watch[i].nextLook = now &+ WorkerPool.longJobNanos }
            }
        }
    }

    /// A worker thread's time on a CPU and, where the kernel reports it, time runnable but
    /// waiting for a CPU (nil when neither can be read).
    private func threadTimes(_ i: Int) -> (ran: UInt64, queued: UInt64?)? {
        var run: UInt64 = 0, wait: UInt64 = 0
        if mb_thread_schedstat(tids[i], &run, &wait) == 0 { return (run, wait) }
        guard let thread = threads[i] else { return nil }
        var clock = clockid_t()
        guard pthread_getcpuclockid(thread, &clock) == 0 else { return nil }
        var ts = timespec()
        guard clock_gettime(clock, &ts) == 0 else { return nil }
        return (UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec), nil)
    }

    /// Takes extra workers idle for `extraIdleNanos` off `idle` and marks them to exit (mutex
    /// held); the caller wakes them.
    private func retireIdleExtras(now: UInt64) -> [Int] {
        guard live > count, !stopping else { return [] }
        var out: [Int] = []
        var i = 0
        while i < idle.count {
            let w = idle[i]
            if extra[w] && live - out.count > count && now > idleSince[w] &+ extraIdleNanos {
                idle.remove(at: i)
                retire[w] = true
                wakePending += 1
                out.append(w)
            } else {
                i += 1
            }
        }
        return out
    }

    /// Abandons and replaces every worker past its deadline plus the grace.
    func checkStuck() {
        let now = monotonicNanos()
        var late: [(Int, any WorkItem, UInt64)] = []
        var capped = false
        pthread_mutex_lock(mutex)
        if !stopping {
            for i in 0..<threads.count where threads[i] != nil && !abandoned[i] {
                guard let job = running[i] else { continue }
                let d = slots[i].deadline.load(ordering: .relaxed)
                guard d != 0, d != .max, now > d &+ graceNanos else { continue }
                guard stuckCount < count, let fresh = freeIndices.popLast() else {
                    capped = true
                    continue
                }
                abandoned[i] = true
                stuckCount += 1
                live -= 1
                if let t = threads[i] { pthread_detach(t) }
                if spawn(index: fresh) != nil { freeIndices.append(fresh) }
                late.append((i, job, (now - slots[i].startedAt.load(ordering: .relaxed)) / 1_000_000))
            }
        }
        let stuck = stuckCount
        pthread_mutex_unlock(mutex)
        for (i, job, ms) in late {
            replaced.add(1, ordering: .relaxed)
            Log.warn("worker \(i) stuck: its job ran \(ms) ms, past its limit plus \(graceNanos / 1_000_000) ms grace; request answered 124, thread abandoned and replaced (\(stuck) stuck)")
            job.abandon(shuttingDown: false)
        }
        if capped { capWarning.logOnce(stuck) } else if stuck < count { capWarning.reset() }
    }

    private let capWarning = OnceFlag()
}

/// Logs the "no more replacements" warning once per episode.
private final class OnceFlag: Sendable {
    private let done = Atomic<Bool>(false)
    func logOnce(_ stuck: Int) {
        if !done.exchange(true, ordering: .relaxed) {
            Log.warn("worker pool: \(stuck) stuck workers already abandoned, the cap; no further replacement until one returns")
        }
    }
    func reset() { done.store(false, ordering: .relaxed) }
}

/// Carries the pool and index into `pthread_create` (retained once, released by the thread).
private final class WorkerContext {
    let pool: WorkerPool
    let index: Int
    let seat: Int
    init(pool: WorkerPool, index: Int, seat: Int = 0) {
        self.pool = pool
        self.index = index
        self.seat = seat
    }
}

private let workerMain: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { raw in
    let ctx = Unmanaged<WorkerContext>.fromOpaque(raw!).takeRetainedValue()
    ctx.pool.loop(index: ctx.index, seat: ctx.seat)
    return nil
}

private let monitorMain: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { raw in
    let ctx = Unmanaged<WorkerContext>.fromOpaque(raw!).takeRetainedValue()
    ctx.pool.monitorLoop()
    return nil
}

/// What the monitor knows of one long job (`demoteLongJobs`): the job (its start time), its
/// thread's counters when first seen long, when, when to look again, and the verdict so far.
private struct LongJob {
    var job: UInt64 = 0
    var ran: UInt64 = 0
    var queued: UInt64? = nil
    var since: UInt64 = 0
    var nextLook: UInt64 = 0
    var kind: JobKind = .unknown
}

/// How a long job uses its thread (`demoteLongJobs`).
private enum JobKind {
    case unknown, spinning, waiting, sharing
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

    /// Removes and returns the oldest job that matches (the jobs behind it keep their order).
    mutating func removeFirst(where matches: (any WorkItem) -> Bool) -> (any WorkItem)? {
        for k in 0..<count {
            let at = (head + k) % slots.count
            guard let j = slots[at], matches(j) else { continue }
            if k == 0 { return pop() }
            // Close the gap: shift the k jobs in front of it back by one.
            var i = k
            while i > 0 {
                slots[(head + i) % slots.count] = slots[(head + i - 1) % slots.count]
                i -= 1
            }
            slots[head] = nil
            head = (head + 1) % slots.count
            count -= 1
            return j
        }
        return nil
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
