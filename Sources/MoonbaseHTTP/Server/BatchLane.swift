import CMicroHTTPD
import MoonbaseCore
import Synchronization

/// Requests the handler runs together (`HTTPHandler.batches`): short writes that share one
/// database transaction (group commit). Each waits here with its connection suspended; one
/// worker at a time takes every request waiting (up to `maxBatch`) and hands them to
/// `HTTPHandler.handleBatch`, which answers them all after one commit. While that batch runs,
/// the next one gathers, so the batch size follows the load: one request at a light load, about
/// as many as there are clients writing at saturation, with no timer and no wait added.
///
/// Why a lane of the pool rather than a thread of its own: a batch job is an ordinary worker
/// job, so it inherits the pool's stuck-job backstop, its shutdown (queued batches are answered
/// 503) and its threads' per-thread state, and an idle server has no extra thread.
///
/// Thread-safety: `state` is guarded by its mutex; a request is answered by exactly one of the
/// batch that took it, `cancel` or `abandon` (`RequestState.deliver` claims it).
final class BatchLane: Sendable {
    /// Requests one batch takes at most: a batch holds the writer for all of them (about
    /// 0.1 ms each), and other writers wait behind it.
    static let maxBatch = 64

    struct State {
        var waiting: [RequestState] = []
        /// A batch job is queued or running; a new one is submitted only when it ends.
        var scheduled = false
        /// Batches run and requests in them (metrics).
        var batches = 0
        var requests = 0
    }

    private let state = Mutex(State())
    let pool: WorkerPool
    let handler: any HTTPHandler

    init(pool: WorkerPool, handler: any HTTPHandler) {
        self.pool = pool
        self.handler = handler
    }

    /// Nothing waits and no batch runs: a request may be tried on the I/O thread instead.
    var idle: Bool { state.withLock { !$0.scheduled && $0.waiting.isEmpty } }

    /// (batches, requests) run so far.
    var counts: (batches: Int, requests: Int) { state.withLock { ($0.batches, $0.requests) } }

    /// Queues `request` (its connection already suspended). False when the pool takes no job
    /// (stopping, queue full): the caller answers it.
    func add(_ request: RequestState) -> Bool {
        let submit = state.withLock { s -> Bool in
            s.waiting.append(request)
            if s.scheduled { return false }
            s.scheduled = true
            return true
        }
        guard submit else { return true }
        if pool.submit(BatchJob(lane: self)) { return true }
        // Refused: this request is answered by the caller, any other added meanwhile here.
        cancelWaiting(except: request)
        return false
    }

    /// Nobody will run what waits (the pool refused a batch job or cancelled it at shutdown):
    /// each is answered 503 (but `except`, which its caller answers), and the next request
    /// submits a job again.
    fileprivate func cancelWaiting(except: RequestState? = nil) {
        let left = state.withLock { s -> [RequestState] in
            s.scheduled = false
            defer { s.waiting = [] }
            return s.waiting
        }
        for r in left where r !== except { r.cancel() }
    }

    /// Requests waiting for the next batch (diagnostics, tests).
    var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// The requests of the next batch.
    fileprivate func take() -> [RequestState] {
        state.withLock { s in
            let n = min(s.waiting.count, BatchLane.maxBatch)
            let batch = Array(s.waiting.prefix(n))
            s.waiting.removeFirst(n)
            s.batches += 1
            s.requests += n
            return batch
        }
    }

    /// A batch job ended (ran, cancelled or abandoned): the next one starts if requests wait.
    fileprivate func ended() {
        let next = state.withLock { s -> Bool in
            s.scheduled = !s.waiting.isEmpty
            return s.scheduled
        }
        if next && !pool.submit(BatchJob(lane: self)) { cancelWaiting() }
    }
}

/// One batch of the lane, as a worker job. It takes its requests when it starts, so those that
/// arrived while it was queued join it.
final class BatchJob: WorkItem, Sendable {
    let lane: BatchLane
    /// The requests taken by `run` (read by `abandon` on the monitor thread).
    private let taken = Mutex<[RequestState]>([])
    /// The lane heard of this job's end (once: an abandoned job's worker may still return).
    private let over = Atomic<Bool>(false)

    init(lane: BatchLane) { self.lane = lane }

    /// A batch holds the CPU for as long as its writes take, which can pass the pool's
    /// long-job mark (3 ms) at saturation: it is not a script spinning, and lowering its
    /// priority would slow every write queued behind it.
    var demotable: Bool { false }

    func run(workerIndex: Int) {
        // Taken under `taken`'s lock, so that `abandon` sees every request this job took.
        let batch = taken.withLock { t -> [RequestState] in
            t = lane.take()
            return t
        }
        if !batch.isEmpty {
            let responses = lane.handler.handleBatch(batch.map(\.request))
            for (r, response) in zip(batch, responses) { r.deliver(response) }
        }
        end()
    }

    private func end() {
        if !over.exchange(true, ordering: .acquiringAndReleasing) { lane.ended() }
    }

    /// The pool stopped before this job ran: everything waiting is answered 503.
    func cancel() {
        over.store(true, ordering: .releasing)
        lane.cancelWaiting()
    }

    /// Its worker did not return in time: its requests are answered now (late results are
    /// dropped) and the requests waiting behind it go to a fresh job.
    func abandon(shuttingDown: Bool) {
        for r in taken.withLock({ $0 }) { r.abandon(shuttingDown: shuttingDown) }
        end()
    }
}
