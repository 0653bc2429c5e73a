import MoonbaseCore
import MoonbaseJSON
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

extension Scheduler {
    /// Starts a job now, outside any schedule (`POST /parse/jobs/NAME`, `moonbase jobs run`).
    ///
    /// - Returns: the `_JobStatus` objectId: the new run's, or, when the job is already
    ///   running, that of the `skipped` row recorded for this start.
    /// - Throws: 141 `Invalid job: "NAME"` for a job Cloud Code does not define; the recorder's
    ///   error if the row cannot be written; 1 (status 503) while shutting down.
    public func runNow(_ job: String, params: JSONObject = JSONObject(), source: JobSource = .api) throws(ParseError) -> String {
        guard runner.hasJob(job) else { throw ParseError(.scriptFailed, "Invalid job: \"\(job)\"") }
        guard let (runId, _) = try start(job, params: params, source: source, at: clock.nowMillis(), tick: nil) else {
            throw ParseError(.internalError, "the job history refused a manual start")
        }
        return runId
    }

    /// The jobs running now, by name, with their run ids.
    public var runningJobs: [String: String] {
        state.withLock { s in s.running.compactMapValues { $0.phase == .abandoned ? nil : $0.runId } }
    }

    /// Waits (real time) until no run is in progress. Returns false on timeout.
    @discardableResult
    public func waitUntilIdle(timeoutMs: Int64) -> Bool {
        let deadline = monotonicNanos() + UInt64(max(0, timeoutMs)) * 1_000_000
        while true {
            if state.withLock({ $0.running.isEmpty }) { return true }
            if monotonicNanos() >= deadline { return false }
            usleep(2000)
        }
    }

    /// Stops the service: no more ticks or starts, running jobs are flagged cancelled and waited
    /// for up to `timeoutMs` (real time); runs still going then are recorded `failed` and no
    /// longer tracked (their own completion is ignored).
    ///
    /// - Returns: the run ids recorded as failed by the shutdown.
    @discardableResult
    public func shutdown(timeoutMs: Int64) -> [String] {
        let runs = state.withLock { s in
            s.accepting = false
            s.timerStop = true
            return s.running.values.compactMap(\.run)
        }
        wakeup.signal()
        for run in runs { run.cancel() }
        waitUntilIdle(timeoutMs: timeoutMs)
        let abandoned: [JobRun] = state.withLock { s in
            var out: [JobRun] = []
            for (job, r) in s.running where r.phase == .running {
                if let run = r.run { out.append(run) }
                s.running[job]?.phase = .abandoned
            }
            return out
        }
        let now = clock.nowMillis()
        for run in abandoned {
            run.flush()
            recorder.finished(runId: run.runId, status: .failed,
                              message: "interrupted: the server shut down before the job finished (waited \(timeoutMs) ms)",
                              at: now, durationMs: now - run.startedAt)
            Log.warn("cron: job '\(run.job)' run \(run.runId) still running at shutdown; recorded as failed")
        }
        return abandoned.map(\.runId)
    }

    /// A cron-triggered start: like `start`, but failures become a `Fired` record and a log line
    /// (a tick has nobody to throw to). Nil when another host took the tick.
    func fire(_ job: String, params: JSONObject, source: JobSource, location: String, at now: Int64, tick: String?) -> Fired? {
        guard runner.hasJob(job) else {
            Log.error("cron: \(location): job '\(job)' is not defined; run recorded as failed")
            let id = try? recorder.started(job: job, source: source, params: params, at: now)
            if let id { recorder.finished(runId: id, status: .failed, message: "Invalid job: \"\(job)\"", at: now, durationMs: 0) }
            return Fired(job: job, location: location, runId: id ?? "", status: .failed)
        }
        do {
            guard let (runId, status) = try start(job, params: params, source: source, at: now, tick: tick) else { return nil }
            return Fired(job: job, location: location, runId: runId, status: status)
        } catch {
            Log.error("cron: \(location): could not start job '\(job)': \(error.message)", fields: [("underlying", error.underlying ?? "")])
            return Fired(job: job, location: location, runId: "", status: .failed)
        }
    }

    /// Starts `job` unless it is running (then records `skipped`). Returns the row id and
    /// `.running` or `.skipped`, or nil when another host took `tick`.
    func start(_ job: String, params: JSONObject, source: JobSource, at now: Int64, tick: String?) throws(ParseError) -> (String, JobRunStatus)? {
        if let shared { return try startShared(shared, job, params: params, source: source, at: now, tick: tick) }
        enum Claim { case claimed, busy(String?), closed }
        let claim: Claim = state.withLock { s in
            guard s.accepting else { return .closed }
            if let r = s.running[job], r.phase != .abandoned { return .busy(r.runId) }
            s.running[job] = Running()
            return .claimed
        }
        switch claim {
        case .closed:
            throw ParseError(.internalError, "the scheduler is shutting down", status: 503)
        case .busy(let other):
            let reason = "skipped: job '\(job)' was still running" + (other.map { " (run \($0))" } ?? "")
            return (try recorder.skipped(job: job, source: source, params: params, at: now, reason: reason), .skipped)
        case .claimed:
            break
        }
        let runId: String
        do {
            runId = try recorder.started(job: job, source: source, params: params, at: now)
        } catch {
            state.withLock { s in _ = s.running.removeValue(forKey: job) }
            throw error
        }
        launch(runId, job, params: params, source: source, at: now)
        return (runId, .running)
    }

    /// `start` with several hosts: the shared history decides (atomically across hosts) whether
    /// the tick is another host's, whether the job is running somewhere, or that it runs here;
    /// memory only tracks this host's own runs (for heartbeats, progress and shutdown).
    private func startShared(_ shared: any SharedJobHistory, _ job: String, params: JSONObject, source: JobSource,
                             at now: Int64, tick: String?) throws(ParseError) -> (String, JobRunStatus)? {
        guard state.withLock({ $0.accepting }) else {
            throw ParseError(.internalError, "the scheduler is shutting down", status: 503)
        }
        switch try shared.claim(job: job, source: source, params: params, at: now, tick: tick,
                                silentBefore: now - options.silenceMs) {
        case .taken:
            return nil
        case .skipped(let id):
            return (id, .skipped)
        case .started(let runId):
            state.withLock { s in s.running[job] = Running() }
            launch(runId, job, params: params, source: source, at: now)
            return (runId, .running)
        }
    }

    /// Runs the job of row `runId` on a thread of its own (its slot in `running` is claimed).
    private func launch(_ runId: String, _ job: String, params: JSONObject, source: JobSource, at now: Int64) {
        let run = JobRun(runId: runId, job: job, params: params, source: source, startedAt: now,
                         recorder: recorder, clock: clock, intervalMs: options.progressIntervalMs)
        state.withLock { s in
            s.running[job]?.runId = runId
            s.running[job]?.run = run
        }
        let spawned = JobThread.spawn { [self] in
            let outcome = runner.run(run)
            finish(run, outcome)
        }
        if spawned, let shared { JobThread.spawn { [self] in heartbeatLoop(run, shared) } }
        if !spawned { finish(run, .failed(message: "could not start a thread for the job")) }
    }

    /// Many hosts: touches the run's row every `heartbeatMs` while it runs. A thread per run,
    /// not the timer, so a run started without the timer (`moonbase jobs run`) heartbeats too and
    /// a slow database write never delays a tick; it ends at the first beat after the run ends.
    private func heartbeatLoop(_ run: JobRun, _ shared: any SharedJobHistory) {
        let pause = Wakeup()
        while true {
            pause.wait(timeoutMs: options.heartbeatMs)
            let alive = state.withLock { s in s.running[run.job]?.runId == run.runId && s.running[run.job]?.phase == .running }
            guard alive else { return }
            shared.heartbeat(runIds: [run.runId], at: clock.nowMillis())
        }
    }

    /// Closes a run: flushes progress, writes the final row, releases the job's slot. A run the
    /// shutdown already recorded as failed is only released.
    private func finish(_ run: JobRun, _ outcome: JobOutcome) {
        let record: Bool = state.withLock { s in
            guard let r = s.running[run.job], r.runId == run.runId else { return false }
            if r.phase == .abandoned {
                s.running.removeValue(forKey: run.job)
                return false
            }
            s.running[run.job]?.phase = .finishing
            return true
        }
        guard record else { return }
        run.flush()
        let now = clock.nowMillis()
        switch outcome {
        case .succeeded(let message):
            recorder.finished(runId: run.runId, status: .succeeded, message: message, at: now, durationMs: now - run.startedAt)
        case .failed(let message):
            recorder.finished(runId: run.runId, status: .failed, message: message, at: now, durationMs: now - run.startedAt)
        }
        state.withLock { s in
            if s.running[run.job]?.runId == run.runId { s.running.removeValue(forKey: run.job) }
        }
    }
}
