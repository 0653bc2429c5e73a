import MoonbaseAPI
import MoonbaseCore

#if canImport(Glibc)
import Glibc
#endif

/// The CLI verbs. Each parses its own options and returns an exit code:
/// 0 ok, 1 failure, 2 usage error.
public enum Commands {
    static let commonValueOptions: Set<String> = ["data", "database", "functions", "cron"]

    public static let usage = """
        usage: moonbase <verb> [options]

        verbs:
          serve     start the server (HTTP, Cloud Code, cron, accounting)
          check     compile and load every Lua and cron file; exit 1 on error
          call      run a Cloud Code function locally against the data dir
          deploy    hot-deploy Lua files to a running server through the admin API
          logs      print a running server's recent log lines (Cloud Code print/log.*); -f follows
          jobs      list schedules with their next run times and last results; `jobs run NAME`
          usage     report request units and costs
          backup    write an online backup of the database
          migrate   copy the SQLite database into an empty PostgreSQL database (--to URL)

        common options: --data DIR (./data)  --functions DIR (./functions)  --cron DIR (./cron)
                        --database postgres://… (run on PostgreSQL instead of SQLite in --data)
        `moonbase <verb> --help` for a verb's options.
        """

    public static func run(_ argv: [String]) -> Int32 {
        guard let verb = argv.first else {
            printErr(usage)
            return 2
        }
        let rest = Array(argv.dropFirst())
        do {
            switch verb {
            case "serve": return try ServeCommand.run(rest)
            case "check": return try CheckCommand.run(rest)
            case "call": return try CallCommand.run(rest)
            case "deploy": return try DeployCommand.run(rest)
            case "logs": return try LogsCommand.run(rest)
            case "jobs": return try JobsCommand.run(rest)
            case "usage": return try UsageCommand.run(rest)
            case "backup": return try BackupCommand.run(rest)
            case "migrate": return try MigrateCommand.run(rest)
            case "--help", "-h", "help":
                print(usage)
                return 0
            case "--version", "version":
                print("moonbase 0.1.0")
                return 0
            default:
                printErr("unknown verb '\(verb)'\n\n" + usage)
                return 2
            }
        } catch let e as UsageError {
            printErr("moonbase \(verb): \(e.message)")
            return 2
        } catch let e as ParseError {
            printErr("moonbase \(verb): \(e.message)\(e.underlying.map { " (\($0))" } ?? "")")
            return 1
        } catch {
            printErr("moonbase \(verb): \(error)")
            return 1
        }
    }

    /// Parses a verb's options, applies the common ones over the environment, and handles `--help`.
    static func parse(_ args: [String], values: Set<String> = [], flags: Set<String> = [],
                      help: String) throws -> (Arguments, HostConfig)? {
        let a = try Arguments(args, valueOptions: values.union(commonValueOptions), flagOptions: flags.union(["help"]))
        if a.flag("help") {
            print(help)
            return nil
        }
        var c = try HostConfig.fromEnvironment()
        if let v = a.value("data") { c.dataDir = v }
        if let v = a.value("database") { c.databaseURL = try HostConfig.databaseURL(v, from: "--database") }
        if let v = a.value("functions") { c.functionsDir = v }
        if let v = a.value("cron") { c.cronDir = v }
        return (a, c)
    }
}

func printErr(_ s: String) {
    var line = s + "\n"
    line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
}

extension String {
    /// The text left-aligned in a column of width `n` (plus one space), for the CLI's tables.
    func padded(_ n: Int) -> String {
        count >= n ? self + " " : self + String(repeating: " ", count: n - count)
    }
}
