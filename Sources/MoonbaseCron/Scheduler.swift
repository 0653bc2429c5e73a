import Foundation
import MoonbaseCore
import MoonbaseJSON
import Synchronization

/// The cron service: keeps the loaded schedules, fires due jobs, and guards against overlap.
///
/// - **Ticks.** `tick(now:)` fires every schedule whose next time is at or before `now`, once,
///   however many of its times passed since the last tick, then computes its next time after
///   `now`. In production a timer thread (started by `start()`) ticks at each schedule's next
///   time (and at least once a second, so clock jumps are noticed); tests drive `tick` with a
///   `ManualClock`.
/// - **Missed ticks are not replayed.** Next times are computed from the moment schedules are
///   loaded (process start or reload): times that passed while the process was down, or while a
///   tick was late, are dropped (the late tick fires once).
/// - **Overlap.** One run per job name at a time. A tick or `runNow` that finds the job running
///   records a `skipped` row (and `runNow` returns its id) instead of starting it again.
/// - **Runs.** Each run gets a thread of its own (`JobRunner` contract) and a `_JobStatus` row
///   through `JobRunRecorder`.
/// - **Reload.** `reload(_:)` swaps the schedule set atomically; a schedule present before and
///   after (same expression, zone, job and params) keeps its next time, others start from now.
/// - **`@reboot`** fires once, in `start()`; lines added by a later reload do not fire.
/// - **Start** marks runs a crash left `running` as failed (`failInterruptedRuns`).
/// - **Shutdown** (`shutdown(timeoutMs:)`) stops ticking and starting, flags runs cancelled,
///   waits for them up to the bound, then records the stragglers as failed.
/// - **Many hosts** (a `SharedJobHistory` is given, on PostgreSQL): every host ticks, and the
///   shared history decides which host runs a tick (`claim`), so each tick runs once
///   cluster-wide and a job running on one host is "still running" for a start on another. Runs
///   heartbeat every `heartbeatMs`; a run silent for `silenceMs` is marked failed before the
///   overlap rule looks at it (every claim does that first), so a host killed mid-job leaves a
///   failed run and the next tick runs elsewhere; the timer also sweeps silent runs every
///   `heartbeatMs`. Crash recovery at start then fails only silent runs, never the live runs of
///   the other hosts.
///
/// `Sendable`: all mutable state is behind one `Mutex`; the recorder and runner are called
/// outside it.
public final class Scheduler: Sendable {
    /// Tunables.
    public struct Options: Sendable {
        /// Minimum time between two progress writes of one run.
        public var progressIntervalMs: Int64 = 1000
        /// The timer thread's longest sleep (ticks at least this often).
        public var maxSleepMs: Int64 = 1000
        /// Many hosts: how often a running job's row is touched, and how long a row may stay
        /// untouched before another host declares the run dead.
        public var heartbeatMs: Int64 = 5000
        public var silenceMs: Int64 = 15000
        /// How long one minute of a cron expression lasts. 60 000 in production; tests only may
        /// shorten it (1000: each cron minute is a second) to see several ticks in seconds.
        public var cronMinuteMs: Int64 = 60_000
        public init() {}
    }

    /// What one tick or start did, per schedule it fired (for logs and tests).
    public struct Fired: Sendable, Equatable {
        public var job: String
        public var location: String
        public var runId: String
        /// `.running` when started, `.skipped` when the job was still running, `.failed` when it
        /// could not be started (undefined job, recorder error).
        public var status: JobRunStatus
    }

    struct Slot {
        var entry: CronEntry
        var next: Int64?
    }

    enum RunPhase { case running, finishing, abandoned }

    struct Running {
        var runId: String?
        var run: JobRun?
        var phase: RunPhase = .running
    }

    struct State {
        var slots: [Slot] = []
        var running: [String: Running] = [:]
        var accepting = true
        var started = false
        var recovered = false
        var timerStop = false
        var chores: [Chore] = []
    }

    /// Host housekeeping run by the timer (e.g. purging expired sessions).
    struct Chore {
        var intervalMs: Int64
        var next: Int64
        var busy = false
        let task: @Sendable () -> Void
    }

    let runner: any JobRunner
    let recorder: any JobRunRecorder
    let clock: any HostClock
    let options: Options
    let shared: (any SharedJobHistory)?
    let state = Mutex(State())
    let wakeup = Wakeup()

    /// - Parameters:
    ///   - runner: runs jobs (MoonbaseHost, over Cloud Code).
    ///   - recorder: writes `_JobStatus` rows (MoonbaseHost, over the store).
    ///   - clock: the time source for ticks, row times and the progress throttle.
    ///   - files: the initial schedules (`CronFile.loadDirectory`).
    ///   - shared: the cluster-wide history when several hosts share the database; nil for one
    ///     host (SQLite), where memory decides ticks and overlap.
    public init(runner: any JobRunner, recorder: any JobRunRecorder, clock: any HostClock,
                files: [CronFile] = [], options: Options = Options(), shared: (any SharedJobHistory)? = nil) {
        self.runner = runner
        self.recorder = recorder
        self.clock = clock
        self.options = options
        self.shared = shared
        reload(files)
        // A dead host's run is failed within seconds even when no tick or start comes to claim.
        if let shared {
            every(options.heartbeatMs) { [clock, options] in
                let now = clock.nowMillis()
                _ = shared.failSilentRuns(silentBefore: now - options.silenceMs, at: now)
            }
        }
    }

    /// The next fire time of `entry` after `now`. With a shortened cron minute (tests), the
    /// expression is read on a time line that runs `60 000 / cronMinuteMs` times faster from the
    /// start of the UTC day, so every host maps the same instant to the same tick.
    func nextTime(_ entry: CronEntry, after now: Int64) -> Int64? {
        let unit = options.cronMinuteMs
        guard unit > 0, unit < 60_000 else { return entry.expression.nextDate(after: now, in: entry.timeZone) }
        let speed = 60_000 / unit
        let day = now - now % 86_400_000
        guard let v = entry.expression.nextDate(after: day + (now - day) * speed, in: entry.timeZone) else { return nil }
        return day + (v - day + speed - 1) / speed
    }

    /// Replaces the schedules (hot reload of the cron directory), atomically.
    public func reload(_ files: [CronFile]) {
        let now = clock.nowMillis()
        state.withLock { s in
            var kept: [String: [Int64?]] = [:]
            for slot in s.slots { kept[slot.entry.scheduleKey, default: []].append(slot.next) }
            s.slots = files.flatMap(\.entries).map { entry in
                if var queue = kept[entry.scheduleKey], !queue.isEmpty {
                    let next = queue.removeFirst()
                    kept[entry.scheduleKey] = queue
                    return Slot(entry: entry, next: next)
                }
                return Slot(entry: entry, next: nextTime(entry, after: now))
            }
        }
        wakeup.signal()
    }

    /// The loaded schedules, in file order.
    public var entries: [CronEntry] { state.withLock { $0.slots.map(\.entry) } }

    /// Crash recovery: marks the runs a crash left `running` as failed. The server calls it
    /// before it accepts requests, so no client reads a dead run as running or is refused a
    /// start by it; `start` calls it too. Only the first call does anything.
    public func recoverInterruptedRuns() {
        let first = state.withLock { s in
            defer { s.recovered = true }
            return !s.recovered
        }
        guard first else { return }
        let now = clock.nowMillis()
        // With other hosts on the database a `running` row may be theirs and alive: only runs
        // silent for too long are dead.
        let recovered = shared.map { $0.failSilentRuns(silentBefore: now - options.silenceMs, at: now) }
            ?? recorder.failInterruptedRuns(at: now)
        if recovered > 0 { Log.warn("cron: marked \(recovered) interrupted job run(s) failed") }
    }

    /// Starts the service: crash recovery (unless done already), `@reboot` schedules, then
    /// (unless `runTimer` is false, as in tests) the timer thread. Calling it again does nothing.
    @discardableResult
    public func start(runTimer: Bool = true) -> [Fired] {
        let first = state.withLock { s in
            defer { s.started = true }
            return !s.started
        }
        guard first else { return [] }
        recoverInterruptedRuns()
        let now = clock.nowMillis()
        let reboots = state.withLock { s in s.slots.filter { $0.entry.expression.isReboot }.map(\.entry) }
        let fired = reboots.compactMap { fire($0.job, params: $0.params, source: .cron, location: $0.location, at: now, tick: nil) }
        if runTimer { JobThread.spawn { [self] in timerLoop() } }
        return fired
    }

    /// Fires every schedule due at `now` (see the type's documentation).
    @discardableResult
    public func tick(now: Int64) -> [Fired] {
        let due: [(entry: CronEntry, at: Int64)] = state.withLock { s in
            guard s.accepting else { return [] }
            var due: [(entry: CronEntry, at: Int64)] = []
            for i in s.slots.indices {
                guard let next = s.slots[i].next, next <= now else { continue }
                due.append((s.slots[i].entry, next))
                s.slots[i].next = nextTime(s.slots[i].entry, after: now)
            }
            return due
        }
        return due.compactMap { d in
            fire(d.entry.job, params: d.entry.params, source: .cron, location: d.entry.location, at: now,
                 tick: shared == nil ? nil : Self.tickKey(d.entry, at: d.at))
        }
    }

    /// A tick's identity across hosts: the schedule (expression, zone, job, params) and its
    /// scheduled time, which every host computes alike (a late host still names the same tick).
    static func tickKey(_ entry: CronEntry, at: Int64) -> String {
        "\(entry.scheduleKey.replacingOccurrences(of: "\u{1}", with: " "))@\(ISO8601.format(millis: at))"
    }

    /// Many hosts: refreshes the heartbeat of every job this host runs now (each run also
    /// heartbeats on its own thread, see `heartbeatLoop`).
    public func heartbeat(now: Int64) {
        guard let shared else { return }
        let ids = state.withLock { s in s.running.values.compactMap { $0.phase == .running ? $0.runId : nil } }
        if !ids.isEmpty { shared.heartbeat(runIds: ids.sorted(), at: now) }
    }

    /// The earliest next fire time of any schedule.
    public var nextFireTime: Int64? { state.withLock { s in s.slots.compactMap(\.next).min() } }

    /// Writes the progress each running job reported but the throttle held back, once its
    /// interval has passed: the latest report shows even while the job reports nothing more.
    /// The timer thread calls it at least every `maxSleepMs`.
    public func flushDueProgress(now: Int64) {
        let runs = state.withLock { s in s.running.values.compactMap { $0.phase == .running ? $0.run : nil } }
        for run in runs { run.flushIfDue(now: now) }
    }

    /// Runs `task` every `intervalMs` (the first time one interval after the timer starts), on a
    /// thread of its own so a task waiting for the writer never delays a schedule; a task still
    /// running when it is due again is not started twice.
    public func every(_ intervalMs: Int64, _ task: @escaping @Sendable () -> Void) {
        let now = clock.nowMillis()
        state.withLock { $0.chores.append(Chore(intervalMs: max(1, intervalMs), next: now + max(1, intervalMs), task: task)) }
    }

    func runDueChores(now: Int64) {
        let due: [Int] = state.withLock { s in
            var out: [Int] = []
            for i in s.chores.indices where !s.chores[i].busy && s.chores[i].next <= now {
                s.chores[i].busy = true
                s.chores[i].next = now + s.chores[i].intervalMs
                out.append(i)
            }
            return out
        }
        for i in due {
            let task = state.withLock { $0.chores[i].task }
            let spawned = JobThread.spawn { [self] in
                task()
                state.withLock { $0.chores[i].busy = false }
            }
            if !spawned { state.withLock { $0.chores[i].busy = false } }
        }
    }

    private func timerLoop() {
        while true {
            if state.withLock({ $0.timerStop }) { return }
            tick(now: clock.nowMillis())
            flushDueProgress(now: clock.nowMillis())
            runDueChores(now: clock.nowMillis())
            var sleep = options.maxSleepMs
            if let next = nextFireTime { sleep = min(sleep, max(1, next - clock.nowMillis())) }
            wakeup.wait(timeoutMs: sleep)
        }
    }
}
