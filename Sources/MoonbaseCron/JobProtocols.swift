import MoonbaseCore
import MoonbaseJSON

/// Where a run was started from (`_JobStatus.source`).
public enum JobSource: String, Sendable {
    /// A schedule in `cron/*.cron` (including `@reboot`).
    case cron
    /// `POST /parse/jobs/NAME` or `moonbase jobs run`.
    case api
}

/// A run's status (`_JobStatus.status`).
public enum JobRunStatus: String, Sendable {
    case running, succeeded, failed, skipped
}

/// How a job ended, as the runner reports it.
public enum JobOutcome: Sendable, Equatable {
    /// The job returned; `message` is its final message (a returned string, or a returned table
    /// JSON-encoded, or empty).
    case succeeded(message: String)
    /// The job raised an error or tripped a limit; `message` says which.
    case failed(message: String)
}

/// Runs jobs. Implemented by MoonbaseHost over the Cloud Code registry.
///
/// Contract:
/// - `run` is called on a thread the scheduler created for this one run (never an HTTP worker,
///   never a dispatch thread), and blocks until the job ends. The implementation gives the run a
///   Lua VM of its own with the job limits and the master identity.
/// - Threads inherit the signal mask of the thread that started the scheduler; a runner that
///   interrupts Lua with a signal unblocks that signal itself.
/// - `run` must return (limits end runaway scripts); `JobRun.isCancelled` turns true when the
///   server is shutting down, so a runner may stop early.
/// - Errors are outcomes (`.failed`), never thrown.
public protocol JobRunner: Sendable {
    /// Whether Cloud Code defines `cloud.job(name, …)` (unknown → 141 `Invalid job: "NAME"`).
    func hasJob(_ name: String) -> Bool
    /// Runs one job to completion on the calling thread.
    func run(_ run: JobRun) -> JobOutcome
}

/// Records runs as `_JobStatus` rows. Implemented by MoonbaseHost over the store.
///
/// Contract: every method may be called from any thread (the scheduler's timer thread, run
/// threads, HTTP workers through `runNow`), concurrently. Times are milliseconds since the epoch
/// from the scheduler's clock; rows store them as Date values.
public protocol JobRunRecorder: Sendable {
    /// Inserts a `running` row (`progress` 0, `startedAt`) and returns its objectId.
    func started(job: String, source: JobSource, params: JSONObject, at: Int64) throws(ParseError) -> String
    /// Updates a running row's `progress` (0…1) and/or `message`. Already throttled by the
    /// scheduler (see `Scheduler.Options.progressIntervalMs`).
    func progress(runId: String, fraction: Double?, message: String?)
    /// Closes a row: `status` (`succeeded` or `failed`), final `message`, `finishedAt`,
    /// `durationMs`. May also prune the job's oldest rows beyond the configured count.
    func finished(runId: String, status: JobRunStatus, message: String, at: Int64, durationMs: Int64)
    /// Inserts a `skipped` row (a tick or start that found the job still running), with
    /// `startedAt` = `finishedAt` = `at` and `message` = `reason`; returns its objectId.
    func skipped(job: String, source: JobSource, params: JSONObject, at: Int64, reason: String) throws(ParseError) -> String
    /// Crash recovery at start: marks every row still `running` as `failed` (message saying the
    /// server stopped during the run, `finishedAt` = `at`) and returns how many there were.
    func failInterruptedRuns(at: Int64) -> Int
}
