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
}
