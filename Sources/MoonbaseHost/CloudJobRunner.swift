import MoonbaseAPI
import MoonbaseCore
import MoonbaseCron
import MoonbaseQuota
import MoonbaseStore

/// Runs a job through Cloud Code and reports its outcome.
struct CloudJobRunner: JobRunner {
    let cloud: CloudService
    let metrics: ServerMetrics
    let store: any DocumentStore

    func hasJob(_ name: String) -> Bool { cloud.hasJob(name) }

    func run(_ run: JobRun) -> JobOutcome {
        let outcome: JobOutcome
        // Jobs are the bulk writers (cleanup, seeding): the writer gets its bigger cache while
        // one runs, and the everyday RssAnon stays small.
        store.beginBulkWork()
        defer { store.endBulkWork() }
        do throws(ParseError) {
            let message = try cloud.runJob(run.job, params: run.params,
                                           progress: { f, t in if let f { run.progress(f, t) } else if let t { run.message(t) } },
                                           message: { run.message($0) })
            // A job returning nothing keeps the last message it reported.
            outcome = .succeeded(message: message ?? run.lastMessage ?? "")
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
