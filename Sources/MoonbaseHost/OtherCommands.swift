import MoonbaseAPI
import MoonbaseCore
import MoonbaseCron
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota
import MoonbaseSQLite

#if canImport(Glibc)
import Glibc
#endif

/// `moonbase check [DIR]`: compile and load every Lua file, parse every cron file and check the
/// jobs they name exist; errors with file:line; exit 1 on any.
enum CheckCommand {
    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, c) = try Commands.parse(args, help: "usage: moonbase check [DIR] [--cron DIR]") else { return 0 }
        let dir = a.positionals.first ?? c.functionsDir
        var failures = 0
        let vm = try LuaVM()
        for s in CloudService.readSources(dir) {
            do throws(LuaLoadError) {
                try vm.load(file: s.file, source: s.text)
            } catch {
                printErr("\(dir)/\(error.description)")
                failures += 1
            }
        }
        let jobs = Set(vm.registry.jobs.keys)
        do throws(CronSyntaxError) {
            for f in try CronFile.loadDirectory(c.cronDir) {
                for e in f.undefinedJobs(jobs) {
                    printErr(e.description)
                    failures += 1
                }
            }
        } catch {
            printErr(error.description)
            failures += 1
        }
        let r = vm.registry
        print("\(dir): \(r.functions.count) function(s), \(r.jobs.count) job(s), \(r.routes.count) route(s), \(r.triggers.count) trigger(s); \(failures) error(s)")
        return failures == 0 ? 0 : 1
    }
}

/// `moonbase call NAME [JSON] [--user ID | --master]`: runs a function locally against the data dir.
enum CallCommand {
    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, c) = try Commands.parse(args, values: ["user"], flags: ["master"],
                                              help: "usage: moonbase call NAME [JSON] [--user ID | --master]") else { return 0 }
        guard let name = a.positionals.first else { throw UsageError("call needs a function name") }
        var params = JSONObject()
        if a.positionals.count > 1 {
            guard let o = try JSON.parse(a.positionals[1]).objectValue else { throw UsageError("params must be a JSON object") }
            params = o
        }
        if a.flag("master") && a.value("user") != nil { throw UsageError("--user and --master exclude each other") }
        let host = try Host.build(c, serving: false)
        var caller = CallerContext(identity: .anonymous, requestId: "cli")
        if a.flag("master") { caller.identity = .master }
        if let id = a.value("user") {
            caller.identity = .user(id)
            caller.user = try host.services.auth.getUser(id, identity: .master)
        }
        let result = try host.services.cloud.callFunction(name, params: params, caller: caller)
        print(JSON.encodeString(["result": result]))
        return 0
    }
}

/// `moonbase backup OUT`: SQLite online backup.
enum BackupCommand {
    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, c) = try Commands.parse(args, help: "usage: moonbase backup OUT [--data DIR]") else { return 0 }
        guard let out = a.positionals.first else { throw UsageError("backup needs an output path") }
        guard FileSystem.exists(c.databasePath) else { throw ParseError.internalError("no database at \(c.databasePath)") }
        let db = try Database(path: c.databasePath)
        try db.backup(to: out)
        db.close()
        print("backup written to \(out)")
        return 0
    }
}

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

/// `moonbase usage [--json] [--from X --to Y --by account|function|hour|day|month]`.
enum UsageCommand {
    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, c) = try Commands.parse(args, values: ["from", "to", "by"], flags: ["json"],
                                              help: "usage: moonbase usage [--json] [--from ISO] [--to ISO] [--by account|function|hour|day|month]")
        else { return 0 }
        guard let by = UsageGrouping(query: a.value("by")) else { throw UsageError("--by must be account, function, hour, day or month") }
        guard let range = UsageReport.range(from: a.value("from"), to: a.value("to"), now: SystemClock().nowMillis()) else {
            throw UsageError("--from/--to must be ISO-8601 dates, from before to")
        }
        let db = try Database(path: c.databasePath)
        let sink = try SQLiteUsageSink(database: db)
        let report = try sink.report(from: range.from, to: range.to, by: by)
        if a.flag("json") {
            print(JSON.encodeString(SQLiteUsageSink.json(report)))
            return 0
        }
        print("usage \(ISO8601.format(millis: report.from)) .. \(ISO8601.format(millis: report.to)) by \(by.rawValue)")
        print("KEY".padded(40) + "UNITS".padded(10) + "REFUSED".padded(10) + "DB R/W".padded(16) + "LUA ms".padded(12) + "WALL ms")
        for r in report.rows {
            print(r.key.padded(40) + String(r.units).padded(10) + String(r.refused).padded(10)
                  + "\(r.dbReads)/\(r.dbWrites)".padded(16) + String(Int(r.luaCpuMs)).padded(12) + String(Int(r.wallMs)))
        }
        return 0
    }
}

extension String {
    func padded(_ n: Int) -> String {
        count >= n ? self + " " : self + String(repeating: " ", count: n - count)
    }
}
