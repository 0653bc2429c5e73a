import MoonbaseAPI
import MoonbaseCore
import MoonbaseJSON

#if canImport(Glibc)
import Glibc
#endif

/// `moonbase logs [-f] [--server URL] [--master-key KEY] [--level L] [--request-id ID] [--json]`:
/// prints the server's recent log lines (Cloud Code `print`/`log.*` and host events) from
/// `GET /admin/logs`; `-f` keeps polling for new lines once a second until interrupted.
enum LogsCommand {
    static let help = """
        usage: moonbase logs [-f|--follow] [--server http://HOST:PORT] [--master-key KEY]
                             [--level debug|info|warn|error] [--request-id ID] [--json]
        """

    static func run(_ args: [String]) throws -> Int32 {
        var args = args
        var follow = false
        if let i = args.firstIndex(of: "-f") {
            follow = true
            args.remove(at: i)
        }
        guard let (a, c) = try Commands.parse(args, values: ["server", "master-key", "level", "request-id"],
                                              flags: ["follow", "json"], help: help)
        else { return 0 }
        follow = follow || a.flag("follow")
        if follow { Signals.unblock() }  // Ctrl-C ends the follower
        guard a.positionals.isEmpty else { throw UsageError("unexpected argument '\(a.positionals[0])'") }
        let server = a.value("server") ?? "http://\(c.host):\(c.port)"
        guard let key = a.value("master-key") ?? c.masterKey
            ?? FileSystem.readFile(c.masterKeyPath).map({ String(decoding: $0, as: UTF8.self).trimmingWhitespace() })
        else {
            throw UsageError("no master key: pass --master-key or set MOONBASE_MASTER_KEY")
        }
        var query = ""
        if let l = a.value("level") { query += "&level=" + percentEncode(l) }
        if let r = a.value("request-id") { query += "&requestId=" + percentEncode(r) }
        var since: Int64 = 0
        while true {
            let (status, text) = try SimpleHTTPClient.request(
                url: server + "/admin/logs?since=\(since)" + query, method: "GET", body: [],
                headers: [("X-Parse-Master-Key", key), ("X-Parse-Application-Id", c.appId)])
            guard status == 200 else {
                printErr("HTTP \(status): \(text)")
                return 1
            }
            let body = try JSON.parse(Array(text.utf8))
            for line in body["lines"]?.arrayValue ?? [] {
                print(a.flag("json") ? line.jsonString : format(line))
                if let s = line["seq"]?.intValue { since = max(since, s) }
            }
            fflush(nil)  // all output streams: stdout is a shared C global Swift 6 will not name
            if !follow { return 0 }
            usleep(1_000_000)
        }
    }

    /// `TIME LEVEL [request id] message function=… at=…`, like the server's text log.
    static func format(_ l: JSONValue) -> String {
        var s = (l["time"]?.stringValue ?? "") + " " + (l["level"]?.stringValue ?? "").uppercased()
        if let r = l["requestId"]?.stringValue { s += " [\(r)]" }
        s += " " + (l["msg"]?.stringValue ?? "")
        for k in ["function", "at"] { if let v = l[k]?.stringValue { s += " \(k)=\(v)" } }
        return s
    }

    static func percentEncode(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            let c = Character(Unicode.Scalar(b))
            if c.isASCII && (c.isLetter || c.isNumber || "-._~".contains(c)) {
                out.append(c)
            } else {
                let hex = String(b, radix: 16, uppercase: true)
                out += "%" + (hex.count == 1 ? "0" : "") + hex
            }
        }
        return out
    }
}
