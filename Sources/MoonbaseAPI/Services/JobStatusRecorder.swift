import MoonbaseCore
import MoonbaseCron
import MoonbaseJSON
import MoonbaseStore

#if canImport(Glibc)
import Glibc
#endif

/// `_JobStatus` rows over the store (master identity): `jobName, source, params, status,
/// message (string), progress (0..1), startedAt, finishedAt (Date values), durationMs`.
/// Old rows beyond `keepPerJob` per job are pruned when a run finishes.
public final class JobStatusRecorder: JobRunRecorder {
    let store: any JobHistoryStore
    let keepPerJob: Int
    /// This host in the rows it starts when hosts share the database (`host`): name and pid.
    let hostId: String
    static let className = "_JobStatus"

    public init(store: any JobHistoryStore, keepPerJob: Int) {
        self.store = store
        self.keepPerJob = keepPerJob
        var name = [CChar](repeating: 0, count: 256)
        let host = gethostname(&name, name.count - 1) == 0 ? String(cString: name) : "host"
        hostId = "\(host):\(getpid())"
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

/// Many hosts on one database: run rows also carry `host` (who runs it), `heartbeatAt` (Date,
/// refreshed every few seconds while it runs) and, for cron starts, `cronTick` (the schedule and
/// its scheduled time; one row per tick cluster-wide).
extension JobStatusRecorder: SharedJobHistory {
    public func claim(job: String, source: JobSource, params: JSONObject, at: Int64, tick: String?,
                      silentBefore: Int64) throws(ParseError) -> SharedStart {
        try store.withJobLock(job) { () throws(ParseError) -> SharedStart in
            try failSilent(silentBefore: silentBefore, at: at)
            var fields: JSONObject = [
                "jobName": .string(job), "source": .string(source.rawValue), "params": .object(params),
                "startedAt": Self.date(at), "host": .string(hostId),
            ]
            if let tick {
                fields["cronTick"] = .string(tick)
                let w: JSONValue = ["jobName": .string(job), "cronTick": .string(tick)]
                if store.schema(Self.className) != nil, try store.count(Self.className, where: w, identity: .master) > 0 {
                    return .taken
                }
            }
            if let other = try runningRun(job) {
                fields["status"] = "skipped"
                fields["message"] = .string("skipped: job '\(job)' was still running (run \(other))")
                fields["progress"] = .double(0)
                fields["finishedAt"] = Self.date(at)
                fields["durationMs"] = .int(0)
                return .skipped(try store.insert(Self.className, fields: fields, acl: nil, identity: .master).objectId)
            }
            fields["status"] = "running"
            fields["message"] = ""
            fields["progress"] = .double(0)
            fields["heartbeatAt"] = Self.date(at)
            return .started(try store.insert(Self.className, fields: fields, acl: nil, identity: .master).objectId)
        }
    }

    public func heartbeat(runIds: [String], at: Int64) {
        do throws(ParseError) {
            let w: JSONValue = ["objectId": ["$in": .array(runIds.map { .string($0) })], "status": "running"]
            _ = try store.updateWhere(Self.className, where: w, changes: ["heartbeatAt": Self.date(at)], identity: .master)
        } catch {
            Log.warn("job heartbeat not recorded: \(error.message)")
        }
    }

    public func failSilentRuns(silentBefore: Int64, at: Int64) -> Int {
        do throws(ParseError) {
            return try failSilent(silentBefore: silentBefore, at: at)
        } catch {
            Log.warn("could not mark silent job runs failed: \(error.message)")
            return 0
        }
    }

    /// Fails the `running` rows whose heartbeat (or, for rows written before heartbeats,
    /// start) is older than `silentBefore`.
    @discardableResult
    func failSilent(silentBefore: Int64, at: Int64) throws(ParseError) -> Int {
        guard store.schema(Self.className) != nil else { return 0 }
        let before: JSONValue = ["$lt": Self.date(silentBefore)]
        let w: JSONValue = ["status": "running", "$or": [
            ["heartbeatAt": before],
            ["heartbeatAt": ["$exists": false], "startedAt": before],
        ]]
        let n = try store.updateWhere(Self.className, where: w, changes: [
            "status": "failed", "finishedAt": Self.date(at),
            "message": .string("no heartbeat since \(ISO8601.format(millis: silentBefore)): the host running it stopped or lost the database"),
        ], identity: .master)
        if n > 0 { Log.warn("cron: marked \(n) job run(s) failed after their host went silent") }
        return n
    }

    /// The objectId of a `running` row of `job`, if any.
    func runningRun(_ job: String) throws(ParseError) -> String? {
        guard store.schema(Self.className) != nil else { return nil }
        let q = FindQuery(className: Self.className, where: ["jobName": .string(job), "status": "running"], limit: 1, keys: ["objectId"])
        let found = try store.find(q, identity: .master, afterFind: nil, afterFindApplies: nil)
        guard case .array(let rows) = try JSON.parse(found.results), let first = rows.first else { return nil }
        return first["objectId"]?.stringValue
    }
}

extension JSONObject {
    func filteringNulls() -> JSONObject {
        JSONObject(entries.filter { !$0.value.isNull })
    }
}
