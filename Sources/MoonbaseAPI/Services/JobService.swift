import MoonbaseCore
import MoonbaseCron
import MoonbaseJSON
import MoonbaseQuota

/// Cron and jobs (DESIGN §6): the scheduler over `cron/*.cron`, running `cloud.job`s on VMs of
/// their own (one thread per run, never an HTTP worker) and recording `_JobStatus` rows.
public final class JobService: Sendable {
    public let scheduler: Scheduler
    public let recorder: JobStatusRecorder
    let cronDir: String

    public init(cloud: CloudService, recorder: JobStatusRecorder, metrics: ServerMetrics, clock: any HostClock, cronDir: String) {
        self.recorder = recorder
        self.cronDir = cronDir
        scheduler = Scheduler(runner: CloudJobRunner(cloud: cloud, metrics: metrics), recorder: recorder, clock: clock)
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

/// Runs a job through Cloud Code and reports its outcome.
struct CloudJobRunner: JobRunner {
    let cloud: CloudService
    let metrics: ServerMetrics

    func hasJob(_ name: String) -> Bool { cloud.hasJob(name) }

    func run(_ run: JobRun) -> JobOutcome {
        let outcome: JobOutcome
        do throws(ParseError) {
            let message = try cloud.runJob(run.job, params: run.params,
                                           progress: { f, t in if let f { run.progress(f, t) } else if let t { run.message(t) } },
                                           message: { run.message($0) })
            outcome = .succeeded(message: message ?? "")
        } catch {
            outcome = .failed(message: error.message)
        }
        switch outcome {
        case .succeeded: metrics.observeJobRun(job: run.job, status: "succeeded")
        case .failed: metrics.observeJobRun(job: run.job, status: "failed")
        }
        return outcome
    }
}
