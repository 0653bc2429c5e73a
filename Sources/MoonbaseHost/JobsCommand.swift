import MoonbaseAPI
import MoonbaseCore
import MoonbaseCron
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota
import MoonbaseStore

#if canImport(Glibc)
import Glibc
#endif

/// `moonbase jobs [--json]`, `moonbase jobs run NAME [JSON]`.
enum JobsCommand {
    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, c) = try Commands.parse(args, flags: ["json"],
                                              help: "usage: moonbase jobs [--json] | moonbase jobs run NAME [JSON]") else { return 0 }
        let host = try Host.build(c, serving: false)
        let s = host.services
        if a.positionals.first == "run" {
            guard a.positionals.count >= 2 else { throw UsageError("jobs run needs a job name") }
            var params = JSONObject()
            if a.positionals.count > 2 {
                guard let o = try JSON.parse(a.positionals[2]).objectValue else { throw UsageError("params must be a JSON object") }
                params = o
            }
            s.jobs.scheduler.start(runTimer: false)
            let id = try s.jobs.scheduler.runNow(a.positionals[1], params: params, source: .api)
            _ = s.jobs.scheduler.waitUntilIdle(timeoutMs: 3_600_000)
            let row = try s.objects.get("_JobStatus", id, caller: CallerContext(identity: .master))
            print(String(decoding: row, as: UTF8.self))
            let status = try JSON.parse(row)["status"]?.stringValue
            return status == "succeeded" ? 0 : 1
        }
        guard a.positionals.isEmpty else { throw UsageError("unknown jobs argument '\(a.positionals[0])'") }
        let json = try AdminJobs.json(s)
        if a.flag("json") {
            print(JSON.encodeString(json))
            return 0
        }
        print("SCHEDULE".padded(16) + "JOB".padded(24) + "NEXT RUNS (UTC)".padded(80) + "LAST RUN")
        for sch in json["schedules"]?.arrayValue ?? [] {
            let next = (sch["next"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: " ")
            let last = sch["lastRun"]
            let lastText = last?.isNull == false
                ? "\(last?["status"]?.stringValue ?? "?") \(last?["startedAt"]?["iso"]?.stringValue ?? "")"
                : "never"
            print((sch["schedule"]?.stringValue ?? "").padded(16) + (sch["job"]?.stringValue ?? "").padded(24)
                  + next.padded(80) + lastText)
        }
        return 0
    }
}
