/// A closure run on the worker pool outside any HTTP request (WebSocket messages, Lua triggers
/// that realtime connections fire).
final class BackgroundJob: WorkItem {
    let work: @Sendable () -> Void
    let onCancel: (@Sendable () -> Void)?

    init(work: @escaping @Sendable () -> Void, onCancel: (@Sendable () -> Void)?) {
        self.work = work
        self.onCancel = onCancel
    }

    func run(workerIndex: Int) { work() }
    func cancel() { onCancel?() }
    /// A background job stuck past its limit has no client waiting for an answer: the pool
    /// replaces its worker and the job's own end, if it ever comes, changes nothing else.
    func abandon(shuttingDown: Bool) {}
}

extension HTTPServer {
    /// Queues `work` on the worker pool (the threads with a Lua VM and a read connection each).
    /// Returns false, without running anything, when the queue is full or the pool stopped;
    /// `onCancel` runs instead of `work` if the pool stops before a worker takes the job.
    public func submit(_ work: @escaping @Sendable () -> Void, onCancel: (@Sendable () -> Void)? = nil) -> Bool {
        core.pool.submit(BackgroundJob(work: work, onCancel: onCancel))
    }
}
