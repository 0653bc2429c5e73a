import MoonbaseCore
import MoonbaseCron
import MoonbaseJSON
import MoonbaseQuota
import MoonbaseStore

/// Cron and jobs: the scheduler over `cron/*.cron`, running `cloud.job`s on VMs of
/// their own (one thread per run, never an HTTP worker) and recording `_JobStatus` rows.
public final class JobService: Sendable {
    public let scheduler: Scheduler
    public let recorder: JobStatusRecorder
    let cronDir: String

    /// `runner` runs a job by name (the composition root's, over Cloud Code).
    /// On a database other hosts share, ticks and starts are decided through the job history.
    public init(runner: any JobRunner, recorder: JobStatusRecorder, metrics: ServerMetrics, clock: any HostClock, cronDir: String,
                options: Scheduler.Options = Scheduler.Options()) {
        self.recorder = recorder
        self.cronDir = cronDir
        let counting = SkipCountingRecorder(base: recorder, metrics: metrics)
        scheduler = Scheduler(runner: runner, recorder: counting, clock: clock, options: options,
                              shared: recorder.store.isSharedByHosts ? counting : nil)
    }

    /// Loads the cron files, checking that every job they name exists. Errors leave the previous
    /// schedules in place and are returned (file:line:column).
    @discardableResult
    public func reload(jobs: Set<String>) -> [String] {
        do throws(CronSyntaxError) {
            let files = try CronFile.loadDirectory(cronDir)
            var problems: [String] = []
            for f in files { problems += f.undefinedJobs(jobs).map(\.description) }
            if !problems.isEmpty {
                for p in problems { Log.error("cron not reloaded: \(p)") }
                return problems
            }
            scheduler.reload(files)
            return []
        } catch {
            Log.error("cron not reloaded: \(error.description)")
            return [error.description]
        }
    }
}

/// The `_JobStatus` recorder, also counting skipped starts in `moonbase_job_runs_total` (runs
/// that ran are counted by the job runner when they end).
struct SkipCountingRecorder: JobRunRecorder {
    let base: JobStatusRecorder
    let metrics: ServerMetrics

    func started(job: String, source: JobSource, params: JSONObject, at: Int64) throws(ParseError) -> String {
        try base.started(job: job, source: source, params: params, at: at)
    }

    func progress(runId: String, fraction: Double?, message: String?) {
        base.progress(runId: runId, fraction: fraction, message: message)
    }

    func finished(runId: String, status: JobRunStatus, message: String, at: Int64, durationMs: Int64) {
        base.finished(runId: runId, status: status, message: message, at: at, durationMs: durationMs)
    }

    func skipped(job: String, source: JobSource, params: JSONObject, at: Int64, reason: String) throws(ParseError) -> String {
        let id = try base.skipped(job: job, source: source, params: params, at: at, reason: reason)
        metrics.observeJobRun(job: job, status: "skipped")
        return id
    }

    func failInterruptedRuns(at: Int64) -> Int { base.failInterruptedRuns(at: at) }
}

extension SkipCountingRecorder: SharedJobHistory {
    func claim(job: String, source: JobSource, params: JSONObject, at: Int64, tick: String?,
               silentBefore: Int64) throws(ParseError) -> SharedStart {
        let start = try base.claim(job: job, source: source, params: params, at: at, tick: tick, silentBefore: silentBefore)
        if case .skipped = start { metrics.observeJobRun(job: job, status: "skipped") }
        return start
    }

    func heartbeat(runIds: [String], at: Int64) { base.heartbeat(runIds: runIds, at: at) }

    func failSilentRuns(silentBefore: Int64, at: Int64) -> Int { base.failSilentRuns(silentBefore: silentBefore, at: at) }
}
