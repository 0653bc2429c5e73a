import MoonbaseCore
import MoonbaseJSON
import Synchronization

/// One schedule as `moonbase jobs` and `GET /admin/jobs` show it.
///
/// The last run and its status live in `_JobStatus`; the host adds them (`lastRun` fields in the
/// JSON) since this module does not read the store.
public struct ScheduleListing: Sendable, Equatable {
    /// `file:line`.
    public var location: String
    /// The expression as written (`*/5 * * * *`, `@daily`).
    public var schedule: String
    /// The zone the schedule is read in (`UTC` unless `CRON_TZ`).
    public var timeZone: String
    public var job: String
    public var params: JSONObject
    /// The next fire times (ms since the epoch), each after the one before; empty for `@reboot`
    /// and for schedules that never fire.
    public var next: [Int64]
    /// The id of the job's run in progress, if any.
    public var runningRunId: String?

    /// `{"location","schedule","timeZone","job","params","next":[ISO-8601…],"running":id|null}`.
    public var json: JSONValue {
        var o = JSONObject()
        o["location"] = .string(location)
        o["schedule"] = .string(schedule)
        o["timeZone"] = .string(timeZone)
        o["job"] = .string(job)
        o["params"] = .object(params)
        o["next"] = .array(next.map { .string(ISO8601.format(millis: $0)) })
        o["running"] = runningRunId.map { .string($0) } ?? .null
        return .object(o)
    }

    /// Listings for schedules that are not loaded in a scheduler (the `moonbase jobs` CLI reads
    /// the cron directory itself).
    ///
    /// - Parameters:
    ///   - files: parsed cron files.
    ///   - now: list times after this instant.
    ///   - count: how many times per schedule (3 for `moonbase jobs`).
    public static func list(_ files: [CronFile], after now: Int64, count: Int = 3) -> [ScheduleListing] {
        files.flatMap(\.entries).map { entry($0, after: now, count: count, running: nil) }
    }

    static func entry(_ e: CronEntry, after now: Int64, count: Int, running: String?) -> ScheduleListing {
        ScheduleListing(location: e.location, schedule: e.expression.source, timeZone: e.timeZoneName,
                        job: e.job, params: e.params,
                        next: e.expression.nextDates(after: now, count: count, in: e.timeZone),
                        runningRunId: running)
    }
}

extension Scheduler {
    /// The loaded schedules with their next `count` times after `now` (default: the clock's
    /// now) and the run in progress, if any.
    public func listing(after now: Int64? = nil, count: Int = 3) -> [ScheduleListing] {
        let t = now ?? clock.nowMillis()
        let (entries, running) = state.withLock { s in (s.slots.map(\.entry), s.running.compactMapValues(\.runId)) }
        return entries.map { ScheduleListing.entry($0, after: t, count: count, running: running[$0.job]) }
    }
}
