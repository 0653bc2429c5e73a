import Dispatch
import MoonbaseCore
import MoonbaseJSON
import Synchronization
import Testing
@testable import MoonbaseCron

/// One `_JobStatus` table in memory shared by several schedulers ("hosts"), implementing the
/// shared-history contract with one lock standing for the database's per-job lock.
final class FakeSharedHistory: SharedJobHistory, JobRunRecorder {
    struct Row: Equatable {
        var id: String, job: String, status: JobRunStatus, host: String, tick: String?
        var heartbeat: Int64, message = ""
    }
    let rows = Mutex<[Row]>([])
    /// Which host the next `claim` is made for (each test host has its own facade).
    func host(_ name: String) -> HostFacade { HostFacade(base: self, name: name) }
    var all: [Row] { rows.withLock { $0 } }
    func row(_ id: String) -> Row? { rows.withLock { $0.first { $0.id == id } } }

    func claim(job: String, source: JobSource, params: JSONObject, at: Int64, tick: String?,
               silentBefore: Int64, host: String) -> SharedStart {
        rows.withLock { r in
            for i in r.indices where r[i].status == .running && r[i].heartbeat < silentBefore {
                r[i].status = .failed
                r[i].message = "silent"
            }
            if let tick, r.contains(where: { $0.job == job && $0.tick == tick }) { return .taken }
            let id = "r\(r.count + 1)"
            if r.contains(where: { $0.job == job && $0.status == .running }) {
                r.append(Row(id: id, job: job, status: .skipped, host: host, tick: tick, heartbeat: at))
                return .skipped(id)
            }
            r.append(Row(id: id, job: job, status: .running, host: host, tick: tick, heartbeat: at))
            return .started(id)
        }
    }
    func claim(job: String, source: JobSource, params: JSONObject, at: Int64, tick: String?,
               silentBefore: Int64) throws(ParseError) -> SharedStart {
        claim(job: job, source: source, params: params, at: at, tick: tick, silentBefore: silentBefore, host: "?")
    }
    func heartbeat(runIds: [String], at: Int64) {
        rows.withLock { r in
            for i in r.indices where runIds.contains(r[i].id) && r[i].status == .running { r[i].heartbeat = at }
        }
    }
    func failSilentRuns(silentBefore: Int64, at: Int64) -> Int {
        rows.withLock { r in
            var n = 0
            for i in r.indices where r[i].status == .running && r[i].heartbeat < silentBefore { r[i].status = .failed; n += 1 }
            return n
        }
    }
    // The plain recorder half (only `progress` and `finished` are used in shared mode).
    func started(job: String, source: JobSource, params: JSONObject, at: Int64) throws(ParseError) -> String {
        throw ParseError(.internalError, "shared mode starts through claim")
    }
    func progress(runId: String, fraction: Double?, message: String?) {}
    func finished(runId: String, status: JobRunStatus, message: String, at: Int64, durationMs: Int64) {
        rows.withLock { r in
            if let i = r.firstIndex(where: { $0.id == runId }) { r[i].status = status; r[i].message = message }
        }
    }
    func skipped(job: String, source: JobSource, params: JSONObject, at: Int64, reason: String) throws(ParseError) -> String {
        throw ParseError(.internalError, "shared mode skips through claim")
    }
    func failInterruptedRuns(at: Int64) -> Int {
        Issue.record("with a shared history, start must not fail every running run")
        return 0
    }

    /// The history as one host sees it (claims are recorded with the host's name).
    struct HostFacade: SharedJobHistory {
        let base: FakeSharedHistory
        let name: String
        func claim(job: String, source: JobSource, params: JSONObject, at: Int64, tick: String?,
                   silentBefore: Int64) throws(ParseError) -> SharedStart {
            base.claim(job: job, source: source, params: params, at: at, tick: tick, silentBefore: silentBefore, host: name)
        }
        func heartbeat(runIds: [String], at: Int64) { base.heartbeat(runIds: runIds, at: at) }
        func failSilentRuns(silentBefore: Int64, at: Int64) -> Int { base.failSilentRuns(silentBefore: silentBefore, at: at) }
    }
}

@Suite("Scheduler on several hosts", .timeLimit(.minutes(1)))
struct SharedSchedulerTests {
    static let t0: Int64 = 1_767_225_600_000 // 2026-01-01T00:00:00Z

    func hosts(_ text: String, jobs: Set<String>, clock: ManualClock, options: Scheduler.Options = Scheduler.Options())
        throws -> (Scheduler, Scheduler, GatedRunner, FakeSharedHistory) {
        let runner = GatedRunner(jobs: jobs)
        let history = FakeSharedHistory()
        let files = [try CronFile(parsing: text, file: "cron/t.cron")]
        let a = Scheduler(runner: runner, recorder: history, clock: clock, files: files, options: options, shared: history.host("A"))
        let b = Scheduler(runner: runner, recorder: history, clock: clock, files: files, options: options, shared: history.host("B"))
        return (a, b, runner, history)
    }

    @Test func eachTickRunsOnOneHost() throws {
        let clock = ManualClock(millis: Self.t0 + 30_000)
        let (a, b, _, history) = try hosts("* * * * * every\n", jobs: ["every"], clock: clock)
        a.start(runTimer: false)
        b.start(runTimer: false)
        for minute in 1...3 {
            let now = Self.t0 + Int64(minute) * 60_000
            // The host whose timer is late by a few ms still names the same tick.
            let fired = a.tick(now: now) + b.tick(now: now + 7)
            #expect(fired.count == 1)
            #expect(fired.first?.status == .running)
            #expect(a.waitUntilIdle(timeoutMs: 10_000) && b.waitUntilIdle(timeoutMs: 10_000))
        }
        let rows = history.all
        #expect(rows.count == 3)
        #expect(Set(rows.compactMap(\.tick)).count == 3)
        #expect(rows.allSatisfy { $0.status == .succeeded })
    }

    @Test func aJobRunningOnOneHostIsRunningForTheOther() throws {
        let clock = ManualClock(millis: Self.t0)
        let (a, b, runner, history) = try hosts("", jobs: ["report"], clock: clock)
        runner.hold("report")
        let id = try a.runNow("report")
        let again = try b.runNow("report")
        #expect(history.row(again)?.status == .skipped)
        #expect(a.runningJobs == ["report": id])
        #expect(b.runningJobs.isEmpty)
        runner.release("report")
        #expect(a.waitUntilIdle(timeoutMs: 10_000))
        #expect(history.row(id)?.status == .succeeded)
    }

    @Test func heartbeatsKeepARunAliveAndSilenceFailsIt() throws {
        let clock = ManualClock(millis: Self.t0 + 30_000)
        let (a, b, runner, history) = try hosts("* * * * * long\n", jobs: ["long"], clock: clock)
        runner.hold("long")
        let first = try #require(a.tick(now: Self.t0 + 60_000).first)
        #expect(b.tick(now: Self.t0 + 60_000).isEmpty)
        // A heartbeats at +5 s and +10 s: at the next tick (+60 s, 50 s later) its run would be
        // silent; keep it alive with a heartbeat at +55 s, so B's tick is skipped.
        a.heartbeat(now: Self.t0 + 115_000)
        let skipped = try #require(b.tick(now: Self.t0 + 120_000).first)
        #expect(skipped.status == .skipped)
        #expect(history.row(first.runId)?.status == .running)
        _ = a.tick(now: Self.t0 + 120_000)   // A's own tick of that minute: already taken
        // A's host now dies (no more heartbeats): 15 s of silence later, B's next tick fails the
        // run before the overlap rule looks, and runs the job itself.
        let next = try #require(b.tick(now: Self.t0 + 180_000).first)
        #expect(next.status == .running)
        #expect(history.row(first.runId)?.status == .failed)
        #expect(history.row(next.runId)?.host == "B")
        // Both runs wait on the same gate: open it for each.
        let gate = runner.gates.withLock { $0.removeValue(forKey: "long") }
        gate?.signal()
        gate?.signal()
        #expect(a.waitUntilIdle(timeoutMs: 10_000) && b.waitUntilIdle(timeoutMs: 10_000))
    }

    @Test func startFailsOnlySilentRunsOfOtherHosts() throws {
        let clock = ManualClock(millis: Self.t0)
        let (a, b, runner, history) = try hosts("", jobs: ["report"], clock: clock)
        runner.hold("report")
        let id = try a.runNow("report")
        clock.set(Self.t0 + 4_000)
        b.recoverInterruptedRuns()
        #expect(history.row(id)?.status == .running)
        runner.release("report")
        #expect(a.waitUntilIdle(timeoutMs: 10_000))
        #expect(history.row(id)?.status == .succeeded)
    }

    @Test func aShortCronMinuteTicksInSeconds() throws {
        var options = Scheduler.Options()
        options.cronMinuteMs = 1000
        let clock = ManualClock(millis: Self.t0 + 10_400)
        let (a, _, _, _) = try hosts("*/3 * * * * every\n", jobs: ["every"], clock: clock, options: options)
        #expect(a.nextFireTime == Self.t0 + 12_000)
        #expect(a.tick(now: Self.t0 + 12_000).count == 1)
        #expect(a.nextFireTime == Self.t0 + 15_000)
        #expect(a.waitUntilIdle(timeoutMs: 10_000))
    }
}
