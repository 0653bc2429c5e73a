import MoonbaseAPI
import MoonbaseAuth
import MoonbaseCore
import MoonbaseCron
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota
import MoonbaseStore

#if canImport(Glibc)
import Glibc
#endif

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
        let answer = try host.services.cloud.functionAnswer(name, params: params, caller: caller)
        print(String(decoding: answer, as: UTF8.self))
        return 0
    }
}
