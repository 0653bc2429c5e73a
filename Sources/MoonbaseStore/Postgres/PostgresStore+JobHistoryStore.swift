import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres

/// Job history over the `_JobStatus` class table: the conditional updates are updates by query
/// (so they keep the document semantics and the change feed); pruning is one statement.
extension PostgresStore {
    static let jobStatusClass = "_JobStatus"

    public func updateRunningJobRun(_ runId: String, changes: JSONObject) throws(ParseError) -> Bool {
        let w: JSONValue = .object(["objectId": .string(runId), "status": "running"])
        return try updateWhere(Self.jobStatusClass, where: w, changes: changes, identity: .master) > 0
    }

    public func updateRunningJobRuns(changes: JSONObject) throws(ParseError) -> Int {
        guard schema(Self.jobStatusClass) != nil else { return 0 }
        return try updateWhere(Self.jobStatusClass, where: .object(["status": "running"]), changes: changes, identity: .master)
    }

    public var isSharedByHosts: Bool { true }

    /// READ COMMITTED under a transaction-scoped advisory lock on the job's name: each statement
    /// after the lock sees everything the previous holder committed, which is all a claim needs
    /// (SERIALIZABLE would only add retries).
    public func withJobLock<T>(_ job: String, _ body: () throws(ParseError) -> T) throws(ParseError) -> T {
        try write(isolation: .readCommitted) { (tx) throws(ParseError) -> T in
            try tx.connection.execute("SELECT pg_advisory_xact_lock($1::int, hashtext($2))",
                                      [.integer(Self.jobLockSpace), .text(job)])
            return try body()
        }
    }

    /// First key of the per-job advisory locks ("mbjb" in ASCII), apart from the class locks.
    static let jobLockSpace: Int64 = 0x6d62_6a62

    /// Keeps the newest `keep` runs of `job` (by creation, then id) and the running ones.
    public func pruneJobHistory(job: String, keep: Int) throws(ParseError) {
        guard schema(Self.jobStatusClass) != nil else { return }
        try pool.withConnection { (c) throws(ParseError) in
            try c.execute("""
                DELETE FROM "_JobStatus" WHERE data->>'jobName' = $1 AND data->>'status' <> 'running'
                  AND objectId NOT IN (SELECT objectId FROM "_JobStatus" WHERE data->>'jobName' = $1
                                       ORDER BY createdAt DESC, objectId DESC LIMIT $2)
                """, [.text(job), .integer(Int64(keep))])
        }
    }
}
