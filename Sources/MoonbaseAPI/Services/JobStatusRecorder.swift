import MoonbaseCore
import MoonbaseCron
import MoonbaseJSON
import MoonbaseStore

/// `_JobStatus` rows over the store (master identity): `jobName, source, params, status,
/// message (string), progress (0..1), startedAt, finishedAt (Date values), durationMs`.
/// Old rows beyond `keepPerJob` per job are pruned when a run finishes.
public final class JobStatusRecorder: JobRunRecorder {
    let store: any JobHistoryStore
    let keepPerJob: Int
    static let className = "_JobStatus"

    public init(store: any JobHistoryStore, keepPerJob: Int) {
        self.store = store
        self.keepPerJob = keepPerJob
    }

    static func date(_ ms: Int64) -> JSONValue {
        ["__type": "Date", "iso": .string(ISO8601.format(millis: ms))]
    }

    public func started(job: String, source: JobSource, params: JSONObject, at: Int64) throws(ParseError) -> String {
        let o = try store.insert(Self.className, fields: [
            "jobName": .string(job), "source": .string(source.rawValue), "params": .object(params),
            "status": "running", "message": "", "progress": .double(0), "startedAt": Self.date(at),
        ], acl: nil, identity: .master)
        return o.objectId
    }

    public func progress(runId: String, fraction: Double?, message: String?) {
        var changes = JSONObject()
        if let fraction { changes["progress"] = .double(fraction) }
        if let message { changes["message"] = .string(message) }
        guard !changes.isEmpty else { return }
        // Only while the row is still `running`: the scheduler's timer may take a held-back report
        // and then wait for the writer behind the job's last transaction, so without this
        // condition it could land after `finished` and overwrite the final message and progress.
        do throws(ParseError) {
            _ = try store.updateRunningJobRun(runId, changes: changes)
        } catch {
            Log.warn("job progress for \(runId) not recorded: \(error.message)")
        }
    }

    public func finished(runId: String, status: JobRunStatus, message: String, at: Int64, durationMs: Int64) {
        do throws(ParseError) {
            let changes: JSONObject = [
                "status": .string(status.rawValue), "message": .string(message), "finishedAt": Self.date(at),
                "durationMs": .int(durationMs), "progress": status == .succeeded ? .double(1) : .null,
            ]
            let o = try store.update(Self.className, objectId: runId, changes: changes.filteringNulls(), identity: .master)
            if let job = try o.fields()["jobName"]?.stringValue { prune(job) }
        } catch {
            Log.warn("job finish for \(runId) not recorded: \(error.message)")
        }
    }

    public func skipped(job: String, source: JobSource, params: JSONObject, at: Int64, reason: String) throws(ParseError) -> String {
        let o = try store.insert(Self.className, fields: [
            "jobName": .string(job), "source": .string(source.rawValue), "params": .object(params),
            "status": "skipped", "message": .string(reason), "progress": .double(0),
            "startedAt": Self.date(at), "finishedAt": Self.date(at), "durationMs": .int(0),
        ], acl: nil, identity: .master)
        return o.objectId
    }

    public func failInterruptedRuns(at: Int64) -> Int {
        do throws(ParseError) {
            return try store.updateRunningJobRuns(changes: [
                "status": "failed", "message": "the server stopped during this run", "finishedAt": Self.date(at),
            ])
        } catch {
            Log.warn("could not mark interrupted job runs failed: \(error.message)")
            return 0
        }
    }

    /// Keeps the newest `keepPerJob` finished rows of a job.
    func prune(_ job: String) {
        do throws(ParseError) {
            try store.pruneJobHistory(job: job, keep: keepPerJob)
        } catch {
            Log.warn("could not prune job history of \(job): \(error.message)")
        }
    }
}

extension JSONObject {
    func filteringNulls() -> JSONObject {
        JSONObject(entries.filter { !$0.value.isNull })
    }
}
