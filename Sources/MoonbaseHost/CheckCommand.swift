import MoonbaseAPI
import MoonbaseCore
import MoonbaseCron
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota

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
        for e in vm.loadAll(CloudCode.readSources(dir), checkModules: true) {
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
