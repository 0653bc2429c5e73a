import MoonbaseCore
import MoonbaseJSON
import Synchronization

/// One run of a job, as handed to `JobRunner.run`: what to run, and the handle through which the
/// job reports progress (`req.progress`, `req.message`).
///
/// Progress writes are throttled: at most one `JobRunRecorder.progress` call per
/// `intervalMs` of the scheduler's clock; the latest value wins and is flushed before the run is
/// closed. `Sendable`: immutable fields plus state behind a `Mutex` and an `Atomic`.
public final class JobRun: Sendable {
    /// The `_JobStatus` objectId.
    public let runId: String
    /// The job's name.
    public let job: String
    /// `req.params`.
    public let params: JSONObject
    /// Who started it.
    public let source: JobSource
    /// When it started (ms since the epoch, scheduler clock).
    public let startedAt: Int64

    private let recorder: any JobRunRecorder
    private let clock: any HostClock
    private let intervalMs: Int64
    private let cancelled = Atomic<Bool>(false)
    private struct Pending {
        var fraction: Double?
        var message: String?
        var lastWrite: Int64 = .min
        /// The last text reported, written or not (the final message of a job returning nothing).
        var lastMessage: String?
    }
    private let pending = Mutex(Pending())

    init(runId: String, job: String, params: JSONObject, source: JobSource, startedAt: Int64,
         recorder: any JobRunRecorder, clock: any HostClock, intervalMs: Int64) {
        self.runId = runId
        self.job = job
        self.params = params
        self.source = source
        self.startedAt = startedAt
        self.recorder = recorder
        self.clock = clock
        self.intervalMs = intervalMs
    }

    /// `req.progress(fraction, text)`: fraction clamped to 0…1 (NaN ignored); text optional.
    public func progress(_ fraction: Double, _ text: String? = nil) {
        update(fraction: fraction.isNaN ? nil : min(1, max(0, fraction)), message: text)
    }

    /// `req.message(text)`.
    public func message(_ text: String) {
        update(fraction: nil, message: text)
    }

    /// The last text given to `message` or `progress`, if any.
    public var lastMessage: String? { pending.withLock { $0.lastMessage } }

    /// True once the server is shutting down; a runner may stop the job early.
    public var isCancelled: Bool { cancelled.load(ordering: .relaxed) }

    func cancel() { cancelled.store(true, ordering: .relaxed) }

    private func update(fraction: Double?, message: String?) {
        let now = clock.nowMillis()
        let write: (Double?, String?)? = pending.withLock { p in
            if let fraction { p.fraction = fraction }
            if let message { p.message = message; p.lastMessage = message }
            guard p.lastWrite == .min || now - p.lastWrite >= intervalMs else { return nil }
            p.lastWrite = now
            defer { p.fraction = nil; p.message = nil }
            return (p.fraction, p.message)
        }
        if let (f, m) = write { recorder.progress(runId: runId, fraction: f, message: m) }
    }

    /// Writes what the throttle held back if `intervalMs` has passed since the last write (the
    /// scheduler's timer calls this, so a held-back report does not wait for the next one).
    func flushIfDue(now: Int64) {
        let write: (Double?, String?)? = pending.withLock { p in
            guard p.fraction != nil || p.message != nil else { return nil }
            guard p.lastWrite == .min || now - p.lastWrite >= intervalMs else { return nil }
            p.lastWrite = now
            defer { p.fraction = nil; p.message = nil }
            return (p.fraction, p.message)
        }
        if let (f, m) = write { recorder.progress(runId: runId, fraction: f, message: m) }
    }

    /// Writes what the throttle held back (called before the run is closed).
    func flush() {
        let write: (Double?, String?)? = pending.withLock { p in
            guard p.fraction != nil || p.message != nil else { return nil }
            defer { p.fraction = nil; p.message = nil }
            return (p.fraction, p.message)
        }
        if let (f, m) = write { recorder.progress(runId: runId, fraction: f, message: m) }
    }
}
