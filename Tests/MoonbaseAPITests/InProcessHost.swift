import MoonbaseAPI
import MoonbaseCore
import MoonbaseHTTP
import MoonbaseHost
import MoonbaseJSON

#if canImport(Glibc)
import Glibc
#endif

/// The whole host built by `Host.build` on a temporary data directory, driven without sockets:
/// a request goes through the same `dispatch` + `handle` the HTTP server calls, on the test's own
/// thread (as Hummingbird's `.router` test mode drives an application in-process).
///
/// Fast and deterministic: no port, no process, no libmicrohttpd; what it cannot show (framing,
/// limits enforced while reading, suspend/resume) the end-to-end tests cover.
final class InProcessHost {
    static let appId = "moonbase"
    static let masterKey = "in-process-master-key"

    let dir: String
    let host: Host

    /// - Parameter functions: Lua files (name → source) written into the functions folder.
    init(functions: [String: String] = [:]) throws {
        var template = Array("/tmp/moonbase-inproc-XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw ParseError.internalError("mkdtemp failed") }
        dir = String(cString: p)
        let functionsDir = dir + "/functions"
        mkdir(functionsDir, 0o700)
        mkdir(dir + "/cron", 0o700)
        for (name, source) in functions {
            guard let f = fopen(functionsDir + "/" + name, "w") else { throw ParseError.internalError("cannot write \(name)") }
            fputs(source, f)
            fclose(f)
        }
        var c = HostConfig()
        c.dataDir = dir + "/data"
        c.functionsDir = functionsDir
        c.cronDir = dir + "/cron"
        c.masterKey = Self.masterKey
        c.appId = Self.appId
        host = try Host.build(c, serving: false)
    }

    deinit {
        host.services.store.close()
        _ = system("rm -rf '\(dir)'")
    }

    struct Response {
        var status: Int
        var headers: [(String, String)]
        var body: [UInt8]
        var json: JSONValue { (try? JSON.parse(body)) ?? .null }
        func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }
    }

    enum Auth { case none, app, master, session(String) }

    /// Sends one request; `query` pairs are passed decoded, as the server would decode them.
    func request(_ method: String, _ path: String, query: [(String, String)] = [], json: JSONValue? = nil, raw: [UInt8]? = nil,
                 auth: Auth = .app, headers extra: [(String, String)] = []) -> Response {
        var headers: [(String, String)] = [("host", "localhost")]
        switch auth {
        case .none: break
        case .app: headers.append(("x-parse-application-id", Self.appId))
        case .master: headers += [("x-parse-application-id", Self.appId), ("x-parse-master-key", Self.masterKey)]
        case .session(let t): headers += [("x-parse-application-id", Self.appId), ("x-parse-session-token", t)]
        }
        var body: [UInt8] = []
        if let json {
            body = JSON.encode(json)
            headers.append(("content-type", "application/json"))
        }
        if let raw { body = raw }
        headers += extra.map { ($0.0.lowercased(), $0.1) }
        var req = HTTPRequest(method: method, path: path, rawQuery: "", query: query, headers: headers, body: body,
                              remoteAddress: "127.0.0.1", requestId: RequestID.generate())
        _ = host.api.dispatch(&req)
        let r = host.api.handle(req)
        return Response(status: r.status, headers: r.headers, body: r.body)
    }

    /// A request as the server holds it after `dispatch` (the route matched, in its note), for
    /// the questions the server asks before queueing it.
    func dispatched(_ method: String, _ path: String) -> HTTPRequest {
        var req = HTTPRequest(method: method, path: path, rawQuery: "", query: [],
                              headers: [("host", "localhost"), ("x-parse-application-id", Self.appId)], body: [],
                              remoteAddress: "127.0.0.1", requestId: RequestID.generate())
        _ = host.api.dispatch(&req)
        return req
    }
}
