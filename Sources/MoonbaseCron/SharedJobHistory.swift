import MoonbaseCore
import MoonbaseJSON

/// What `SharedJobHistory.claim` decided for one start.
public enum SharedStart: Sendable, Equatable {
    /// This host runs the job: the new `running` row's objectId.
    case started(String)
    /// The job was running (on this host or another): the `skipped` row's objectId.
    case skipped(String)
    /// Another host already took this tick: nothing was written, nothing runs here.
    case taken
}

/// The job history when several hosts share one database (PostgreSQL): the scheduler then asks it,
/// not its own memory, whether a start may run, so each tick runs on one host and the overlap
/// rule holds across hosts. Implemented by MoonbaseAPI's `JobStatusRecorder` over the store.
///
/// Why a unique run row per tick and not a lease: every tick already writes exactly one
/// `_JobStatus` row (running, skipped or failed), so making that row unique per (schedule, tick)
/// is the whole protocol; a lease would be a second record of the same fact that can disagree
/// with the first after a crash.
///
/// Contract: `claim` is atomic across hosts (one cluster-wide lock per job name while it
/// decides): it first marks failed the runs of every job whose heartbeat is older than
/// `silentBefore` (their host died or lost the database), then, for a tick, answers `.taken` if a
/// row for `tick` exists, then records `skipped` if a run of `job` is still `running`, else
/// inserts the `running` row (with `tick`, this host's id and a first heartbeat).
public protocol SharedJobHistory: Sendable {
    /// Decides and records one start (see the type's contract). `tick` identifies a schedule's
    /// tick (nil for manual starts, which are never `.taken`).
    func claim(job: String, source: JobSource, params: JSONObject, at: Int64, tick: String?,
               silentBefore: Int64) throws(ParseError) -> SharedStart
    /// Refreshes the heartbeat of these runs (those still `running`).
    func heartbeat(runIds: [String], at: Int64)
    /// Marks failed every run whose heartbeat is older than `silentBefore`; returns how many.
    func failSilentRuns(silentBefore: Int64, at: Int64) -> Int
}
