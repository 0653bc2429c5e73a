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
        guard let (a, c) = try Commands.parse(args, flags: ["list-api"],
                                              help: "usage: moonbase check [DIR] [--cron DIR] | moonbase check --list-api") else { return 0 }
        let vm = try LuaVM()
        if a.flag("list-api") {
            // The Lua globals and namespace functions a script can use, one per line (for editor
            // setups such as a Lua language server's globals list).
            for name in vm.apiNames() { print(name) }
            return 0
        }
        let dir = a.positionals.first ?? c.functionsDir
        var failures = 0
        for e in vm.loadAll(CloudService.readSources(dir), checkModules: true) {
            printErr("\(dir)/\(e.description)")
            failures += 1
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
            caller.identity = try host.services.objects.store.identity(forUser: id)
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

/// `moonbase usage [--json] [--from X --to Y --by account|function|hour|day|month]`. Without
/// `--by` it shows the accounts and the functions (with `--json`: `{"accounts":…,"functions":…}`).
enum UsageCommand {
    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, c) = try Commands.parse(args, values: ["from", "to", "by"], flags: ["json"],
                                              help: "usage: moonbase usage [--json] [--from ISO] [--to ISO] [--by account|function|hour|day|month]")
        else { return 0 }
        var groupings: [UsageGrouping] = [.account, .function]
        if let v = a.value("by") {
            guard let by = UsageGrouping(query: v) else { throw UsageError("--by must be account, function, hour, day or month") }
            groupings = [by]
        }
        guard let range = UsageReport.range(from: a.value("from"), to: a.value("to"), now: SystemClock().nowMillis()) else {
            throw UsageError("--from/--to must be ISO-8601 dates, from before to")
        }
        let db = try Database(path: c.databasePath)
        let sink = try SQLiteUsageSink(database: db)
        var reports: [UsageReport] = []
        for by in groupings { reports.append(try sink.report(from: range.from, to: range.to, by: by)) }
        if a.flag("json") {
            if reports.count == 1 {
                print(JSON.encodeString(SQLiteUsageSink.json(reports[0])))
            } else {
                print(JSON.encodeString(.object(["accounts": SQLiteUsageSink.json(reports[0]),
                                                 "functions": SQLiteUsageSink.json(reports[1])])))
            }
            return 0
        }
        for (i, report) in reports.enumerated() {
            if i > 0 { print("") }
            print("usage \(ISO8601.format(millis: report.from)) .. \(ISO8601.format(millis: report.to)) by \(report.by.rawValue)")
            print("KEY".padded(40) + "UNITS".padded(10) + "REFUSED".padded(10) + "DB R/W".padded(16) + "LUA ms".padded(12) + "WALL ms")
            for r in report.rows {
                print(r.key.padded(40) + String(r.units).padded(10) + String(r.refused).padded(10)
                      + "\(r.dbReads)/\(r.dbWrites)".padded(16) + String(Int(r.luaCpuMs)).padded(12) + String(Int(r.wallMs)))
            }
        }
        return 0
    }
}

extension String {
    func padded(_ n: Int) -> String {
        count >= n ? self + " " : self + String(repeating: " ", count: n - count)
    }
}
