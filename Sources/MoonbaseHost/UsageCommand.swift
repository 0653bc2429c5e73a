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
        let store: any UsageStore
        if let url = c.databaseURL { store = try PostgresStore(url: url) } else { store = try SQLiteDocumentStore(path: c.databasePath) }
        var reports: [UsageReport] = []
        for by in groupings { reports.append(try store.usageReport(from: range.from, to: range.to, by: by)) }
        if a.flag("json") {
            if reports.count == 1 {
                print(JSON.encodeString(reports[0].json))
            } else {
                print(JSON.encodeString(.object(["accounts": reports[0].json, "functions": reports[1].json])))
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
