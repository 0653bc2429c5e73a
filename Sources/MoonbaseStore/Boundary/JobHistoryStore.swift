import MoonbaseCore
import MoonbaseJSON

/// The history of job runs: `_JobStatus` objects (fields `jobName, source, params, status,
/// message, progress, startedAt, finishedAt, durationMs`), created and read as documents, plus
/// the conditional and bulk writes the job recorder needs.
public protocol JobHistoryStore: DocumentStore {
    /// Applies `changes` to run `runId` only while its status is still `running` (a late
    /// progress report must not overwrite the final state). Returns whether it applied.
    func updateRunningJobRun(_ runId: String, changes: JSONObject) throws(ParseError) -> Bool
    /// Applies `changes` to every run still `running` (after a restart: they were cut short).
    /// Returns how many.
    func updateRunningJobRuns(changes: JSONObject) throws(ParseError) -> Int
    /// Keeps the newest `keep` finished runs of `job`, deleting the older ones.
    func pruneJobHistory(job: String, keep: Int) throws(ParseError)
    /// Runs `body` as one transaction that holds, until it ends, a lock on the job name `job`
    /// which every host sharing the database respects (so deciding whether a tick or start may
    /// run, and recording it, is atomic cluster-wide). Store calls in `body` join it.
    func withJobLock<T>(_ job: String, _ body: () throws(ParseError) -> T) throws(ParseError) -> T
    /// Whether other hosts may use the same database (PostgreSQL): cron then coordinates
    /// through the job history instead of this process's memory.
    var isSharedByHosts: Bool { get }
}

extension JobHistoryStore {
    public var isSharedByHosts: Bool { false }

    /// Nothing to lock on one host by default: the body runs in one transaction.
    public func withJobLock<T>(_ job: String, _ body: () throws(ParseError) -> T) throws(ParseError) -> T {
        try transaction(body)
    }
}
