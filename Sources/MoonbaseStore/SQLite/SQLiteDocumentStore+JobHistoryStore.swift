import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// Job history over the `_JobStatus` class table.
extension SQLiteDocumentStore: JobHistoryStore {
    static let jobStatusClass = "_JobStatus"

    public func updateRunningJobRun(_ runId: String, changes: JSONObject) throws(ParseError) -> Bool {
        let stillRunning = CompiledWhere(sql: "objectId = ? AND json_extract(data,'$.status') = 'running'",
                                         binds: [.text(runId)])
        return try updateWhere(Self.jobStatusClass, where: stillRunning, changes: changes, identity: .master) > 0
    }

    public func updateRunningJobRuns(changes: JSONObject) throws(ParseError) -> Int {
        guard schema(Self.jobStatusClass) != nil else { return 0 }
        let running = CompiledWhere(sql: "json_extract(data,'$.status') = ?", binds: [.text("running")])
        return try updateWhere(Self.jobStatusClass, where: running, changes: changes, identity: .master)
    }

    public func pruneJobHistory(job: String, keep: Int) throws(ParseError) {
        guard schema(Self.jobStatusClass) != nil else { return }
        try database.write { (tx) throws(ParseError) in
            _ = try tx.connection.run("""
                DELETE FROM "_JobStatus" WHERE json_extract(data,'$.jobName') = ?1
                  AND json_extract(data,'$.status') != 'running'
                  AND rid NOT IN (SELECT rid FROM "_JobStatus" WHERE json_extract(data,'$.jobName') = ?1
                                  ORDER BY createdAt DESC, rid DESC LIMIT ?2)
                """, [.text(job), .integer(Int64(keep))])
        }
    }
}
