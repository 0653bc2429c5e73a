import Foundation
import MoonbaseCore
import MoonbaseJSON
import Synchronization
import Testing
@testable import MoonbaseCron

/// A `_JobStatus` table in memory.
final class FakeRecorder: JobRunRecorder {
    struct Row: Equatable {
        var id: String, job: String, source: JobSource, status: JobRunStatus
        var message = "", progress: Double = 0, startedAt: Int64, finishedAt: Int64? = nil, durationMs: Int64? = nil
        var progressWrites = 0
    }
    let rows = Mutex<[Row]>([])
    let interrupted = Mutex(0)

    func row(_ id: String) -> Row? { rows.withLock { $0.first { $0.id == id } } }
    var all: [Row] { rows.withLock { $0 } }

    func started(job: String, source: JobSource, params: JSONObject, at: Int64) throws(ParseError) -> String {
        rows.withLock { r in
            r.append(Row(id: "r\(r.count + 1)", job: job, source: source, status: .running, startedAt: at))
            return "r\(r.count)"
        }
    }
    func progress(runId: String, fraction: Double?, message: String?) {
        rows.withLock { r in
            guard let i = r.firstIndex(where: { $0.id == runId }) else { return }
            if let fraction { r[i].progress = fraction }
            if let message { r[i].message = message }
            r[i].progressWrites += 1
        }
    }
    func finished(runId: String, status: JobRunStatus, message: String, at: Int64, durationMs: Int64) {
        rows.withLock { r in
            guard let i = r.firstIndex(where: { $0.id == runId }) else { return }
            r[i].status = status; r[i].message = message; r[i].finishedAt = at; r[i].durationMs = durationMs
        }
    }
    func skipped(job: String, source: JobSource, params: JSONObject, at: Int64, reason: String) throws(ParseError) -> String {
        rows.withLock { r in
            r.append(Row(id: "r\(r.count + 1)", job: job, source: source, status: .skipped, message: reason, startedAt: at, finishedAt: at))
            return "r\(r.count)"
        }
    }
    func failInterruptedRuns(at: Int64) -> Int {
        rows.withLock { r in
            var n = 0
            for i in r.indices where r[i].status == .running { r[i].status = .failed; r[i].finishedAt = at; n += 1 }
            interrupted.withLock { $0 += n }
            return n
        }
    }
}

/// Jobs that block until the test releases them, and record what they were given.
final class GatedRunner: JobRunner {
    let jobs: Set<String>
    let gates = Mutex<[String: DispatchSemaphore]>([:])
    let calls = Mutex<[(job: String, params: JSONObject, thread: Bool)]>([])
    /// What a job does once released (given the run): default success with "done".
    let body: @Sendable (JobRun) -> JobOutcome

    init(jobs: Set<String>, body: @escaping @Sendable (JobRun) -> JobOutcome = { _ in .succeeded(message: "done") }) {
        self.jobs = jobs
        self.body = body
    }
    func hasJob(_ name: String) -> Bool { jobs.contains(name) }
    func hold(_ job: String) { gates.withLock { $0[job] = DispatchSemaphore(value: 0) } }
    func release(_ job: String) { gates.withLock { $0.removeValue(forKey: job) }?.signal() }
    func run(_ run: JobRun) -> JobOutcome {
        calls.withLock { $0.append((run.job, run.params, !Thread.isMainThread)) }
        if let gate = gates.withLock({ $0[run.job] }) {
            while gate.wait(timeout: .now() + .milliseconds(5)) == .timedOut {
                if run.isCancelled && run.job.hasPrefix("polite") { return .failed(message: "cancelled") }
            }
        }
        return body(run)
    }
}

@Suite("Scheduler", .timeLimit(.minutes(1)))
struct SchedulerTests {
    static let t0: Int64 = 1_767_225_600_000 // 2026-01-01T00:00:00Z

    func make(_ text: String, jobs: Set<String>, clock: ManualClock,
              body: @escaping @Sendable (JobRun) -> JobOutcome = { _ in .succeeded(message: "done") })
        throws -> (Scheduler, GatedRunner, FakeRecorder) {
        let runner = GatedRunner(jobs: jobs, body: body)
        let recorder = FakeRecorder()
        let s = Scheduler(runner: runner, recorder: recorder, clock: clock,
                          files: [try CronFile(parsing: text, file: "cron/t.cron")])
        return (s, runner, recorder)
    }

    @Test func firesOncePerTickAtTheScheduledTimes() throws {
        let clock = ManualClock(millis: Self.t0 + 30_000)
        let (s, _, rec) = try make("* * * * * every {\"n\": 1}\n*/5 * * * * five\n", jobs: ["every", "five"], clock: clock)
        #expect(s.tick(now: Self.t0 + 59_000).isEmpty)
        let fired = s.tick(now: Self.t0 + 60_000)
        #expect(fired.map(\.job) == ["every"])
        #expect(fired.first?.status == .running)
        #expect(s.waitUntilIdle(timeoutMs: 10_000))
        // A late tick fires a missed schedule once, not once per missed minute.
        let late = s.tick(now: Self.t0 + 5 * 60_000 + 10_000)
        #expect(late.map(\.job).sorted() == ["every", "five"])
        #expect(s.waitUntilIdle(timeoutMs: 10_000))
        #expect(s.tick(now: Self.t0 + 5 * 60_000 + 20_000).isEmpty)
        let rows = rec.all
        #expect(rows.count == 3)
        #expect(rows.allSatisfy { $0.status == .succeeded && $0.message == "done" && $0.source == .cron })
        #expect(s.nextFireTime == Self.t0 + 6 * 60_000)
    }

    @Test func overlappingTickIsRecordedSkipped() throws {
        let clock = ManualClock(millis: Self.t0)
        let (s, runner, rec) = try make("* * * * * slow\n", jobs: ["slow"], clock: clock)
        runner.hold("slow")
        let first = try #require(s.tick(now: Self.t0 + 60_000).first)
        #expect(first.status == .running)
        let second = try #require(s.tick(now: Self.t0 + 120_000).first)
        #expect(second.status == .skipped)
        #expect(rec.row(second.runId)?.status == .skipped)
        #expect(rec.row(second.runId)?.message.contains(first.runId) == true)
        #expect(s.runningJobs == ["slow": first.runId])
        runner.release("slow")
        #expect(s.waitUntilIdle(timeoutMs: 10_000))
        #expect(rec.row(first.runId)?.status == .succeeded)
        #expect(runner.calls.withLock { $0.count } == 1)
    }

    @Test func runNowStartsSkipsOrRefuses() throws {
        let clock = ManualClock(millis: Self.t0)
        let (s, runner, rec) = try make("", jobs: ["report"], clock: clock)
        #expect(throws: ParseError.self) { try s.runNow("nope") }
        do {
            _ = try s.runNow("nope")
        } catch {
            #expect(error.code == .scriptFailed)
            #expect(error.message == "Invalid job: \"nope\"")
        }
        runner.hold("report")
        let id = try s.runNow("report", params: ["x": 1])
        let again = try s.runNow("report")
        #expect(id != again)
        #expect(rec.row(id)?.source == .api)
        #expect(rec.row(again)?.status == .skipped)
        runner.release("report")
        #expect(s.waitUntilIdle(timeoutMs: 10_000))
        #expect(runner.calls.withLock { $0.map(\.params) } == [["x": 1]])
        #expect(runner.calls.withLock { $0.allSatisfy(\.thread) })
    }

    @Test func outcomesAndThrottledProgressReachTheRow() throws {
        let clock = ManualClock(millis: Self.t0)
        let (s, _, rec) = try make("", jobs: ["work", "broken"], clock: clock) { run in
            if run.job == "broken" { return .failed(message: "boom (functions/jobs.lua:3)") }
            run.progress(0.1, "starting")
            run.progress(0.5)          // throttled: within the interval
            run.message("halfway")     // throttled
            clock.advance(byMillis: 2500)
            return .succeeded(message: "{\"deleted\":3}")
        }
        let ok = try s.runNow("work")
        let bad = try s.runNow("broken")
        #expect(s.waitUntilIdle(timeoutMs: 10_000))
        let row = try #require(rec.row(ok))
        #expect(row.status == .succeeded)
        #expect(row.message == "{\"deleted\":3}")
        #expect(row.progress == 0.5)
        #expect(row.progressWrites == 2)   // the first write, then the flush before closing
        #expect(row.durationMs == 2500)
        #expect(rec.row(bad)?.status == .failed)
        #expect(rec.row(bad)?.message == "boom (functions/jobs.lua:3)")
    }

    @Test func startRecoversCrashedRunsAndFiresRebootOnce() throws {
        let clock = ManualClock(millis: Self.t0)
        let (s, _, rec) = try make("@reboot warm\n@hourly hourly\n", jobs: ["warm", "hourly"], clock: clock)
        _ = try rec.started(job: "hourly", source: .cron, params: [:], at: Self.t0 - 1000) // left by a crash
        let fired = s.start(runTimer: false)
        #expect(fired.map(\.job) == ["warm"])
        #expect(rec.interrupted.withLock { $0 } == 1)
        #expect(rec.row("r1")?.status == .failed)
        #expect(s.start(runTimer: false).isEmpty)
        #expect(s.waitUntilIdle(timeoutMs: 10_000))
        // @reboot never fires from a tick.
        #expect(s.tick(now: Self.t0 + 3_600_000).map(\.job) == ["hourly"])
        #expect(s.waitUntilIdle(timeoutMs: 10_000))
    }

    @Test func shutdownWaitsUpToTheBoundThenRecordsFailure() throws {
        let clock = ManualClock(millis: Self.t0)
        let (s, runner, rec) = try make("", jobs: ["stuck", "politeJob"], clock: clock)
        runner.hold("stuck")
        runner.hold("politeJob")
        let stuck = try s.runNow("stuck")
        let polite = try s.runNow("politeJob")
        let begin = monotonicNanos()
        let failed = s.shutdown(timeoutMs: 300)
        let waitedMs = (monotonicNanos() - begin) / 1_000_000
        #expect(failed == [stuck])
        #expect(waitedMs >= 250 && waitedMs < 20_000)
        #expect(rec.row(stuck)?.status == .failed)
        #expect(rec.row(stuck)?.message.contains("shut down") == true)
        #expect(rec.row(polite)?.status == .failed)
        #expect(rec.row(polite)?.message == "cancelled")
        #expect(throws: ParseError.self) { try s.runNow("politeJob") }
        #expect(s.tick(now: Self.t0 + 86_400_000).isEmpty)
        // The stuck job's late end does not overwrite the row.
        runner.release("stuck")
        #expect(s.waitUntilIdle(timeoutMs: 10_000))
        #expect(rec.row(stuck)?.message.contains("shut down") == true)
    }

    @Test func reloadSwapsSchedulesAndKeepsUnchangedNextTimes() throws {
        let clock = ManualClock(millis: Self.t0 + 10_000)
        let (s, _, _) = try make("*/5 * * * * five\n", jobs: ["five", "hourly"], clock: clock)
        #expect(s.nextFireTime == Self.t0 + 300_000)
        // Reloaded at 00:05:00.050, before the 00:05 tick ran: the unchanged schedule keeps 00:05.
        clock.set(Self.t0 + 300_050)
        s.reload([try CronFile(parsing: "*/5 * * * * five\n@hourly hourly\n", file: "cron/t.cron")])
        #expect(s.entries.map(\.job) == ["five", "hourly"])
        #expect(s.tick(now: Self.t0 + 300_100).map(\.job) == ["five"])
        s.reload([try CronFile(parsing: "@hourly hourly\n", file: "cron/t.cron")])
        #expect(s.entries.map(\.job) == ["hourly"])
        #expect(s.nextFireTime == Self.t0 + 3_600_000)
        #expect(s.waitUntilIdle(timeoutMs: 10_000))
    }

    @Test func undefinedJobInAScheduleIsRecordedFailed() throws {
        let clock = ManualClock(millis: Self.t0)
        let (s, _, rec) = try make("* * * * * gone\n", jobs: [], clock: clock)
        let fired = try #require(s.tick(now: Self.t0 + 60_000).first)
        #expect(fired.status == .failed)
        #expect(rec.row(fired.runId)?.message == "Invalid job: \"gone\"")
    }

    @Test func listingShowsRunningJobAndNextTimes() throws {
        let clock = ManualClock(millis: Self.t0)
        let (s, runner, _) = try make("CRON_TZ=Europe/Berlin\n0 9 * * * morning\n", jobs: ["morning"], clock: clock)
        runner.hold("morning")
        let id = try s.runNow("morning")
        let l = try #require(s.listing().first)
        #expect(l.timeZone == "Europe/Berlin")
        #expect(l.runningRunId == id)
        #expect(l.next.map { ISO8601.format(millis: $0) }
                == ["2026-01-01T08:00:00.000Z", "2026-01-02T08:00:00.000Z", "2026-01-03T08:00:00.000Z"])
        runner.release("morning")
        #expect(s.waitUntilIdle(timeoutMs: 10_000))
    }

    @Test func timerThreadTicksOnTheRealClock() throws {
        let runner = GatedRunner(jobs: ["tick"])
        let recorder = FakeRecorder()
        // A clock 200 ms before a minute boundary, moving in real time.
        let offset = Self.t0 + 60_000 - 200 - SystemClock().nowMillis()
        struct Shifted: HostClock { let offset: Int64; func nowMillis() -> Int64 { SystemClock().nowMillis() + offset } }
        let s = Scheduler(runner: runner, recorder: recorder, clock: Shifted(offset: offset),
                          files: [try CronFile(parsing: "* * * * * tick\n", file: "cron/t.cron")])
        s.start()
        let deadline = monotonicNanos() + 20_000_000_000
        while recorder.all.first?.status != .succeeded && monotonicNanos() < deadline { usleep(5000) }
        #expect(recorder.all.first?.status == .succeeded)
        #expect(recorder.all.first?.startedAt ?? 0 >= Self.t0 + 60_000)
        s.shutdown(timeoutMs: 5000)
    }
}
