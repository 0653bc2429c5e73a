import MoonbaseCore
import MoonbaseCron
import MoonbaseCrypto
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota
import MoonbaseStore

/// Cloud functions, jobs, schemas, health and metrics.
enum CloudEndpoints {
    static func routes(_ s: Services) -> [(String, String, Endpoint)] {
        [
            ("POST", "/parse/functions/:name", Endpoint("functions.call", access: .app, attemptable: true) { req throws(ParseError) in
                let name = req.param("name")
                req.target = .function(name)
                let params = try req.jsonBody()
                return .json(200, try s.cloud.functionAnswer(name, params: params, caller: s.caller(req)))
            }),
            ("POST", "/parse/jobs/:name", Endpoint("jobs.start", access: .master) { req throws(ParseError) in
                let name = req.param("name")
                req.target = .job(name)
                let id = try s.jobs.scheduler.runNow(name, params: try req.jsonBody(), source: .api)
                return .json(200, Array("{}".utf8), headers: [("X-Parse-Job-Status-Id", id)])
            }),
            ("GET", "/parse/schemas/:className", Endpoint("schemas.get", access: .master) { req throws(ParseError) in
                let className = req.param("className")
                guard let schema = s.store.getSchema(className) else {
                    throw ParseError(.invalidClassName, "Class \(className) does not exist.")
                }
                return .json(200, JSON.encode(schema))
            }),
            ("PUT", "/parse/schemas/:className", Endpoint("schemas.update", access: .master) { req throws(ParseError) in
                try updateSchema(s, req)
            }),
            ("POST", "/parse/schemas/:className", Endpoint("schemas.create", access: .master) { req throws(ParseError) in
                try updateSchema(s, req)
            }),
            // Any method: the Parse SDKs check health with POST, as Parse Server answers it.
            ("*", "/parse/health", Endpoint("health", access: .open, inline: true, charged: false) { _ throws(ParseError) in
                healthAnswer()
            }),
            ("GET", "/metrics", Endpoint("metrics", access: .open, inline: true, charged: false) { req throws(ParseError) in
                if s.config.metricsRequireMaster {
                    guard let k = req.http.header("x-parse-master-key"), ConstantTime.equals(k, s.masterKey) else {
                        throw ParseError(.operationForbidden, "unauthorized: master key is required")
                    }
                }
                return .text(200, s.metrics.render(), contentType: "text/plain; version=0.0.4; charset=utf-8")
            }),
        ]
    }

    /// `PUT /parse/schemas/CLASS` with `indexes` and/or `classLevelPermissions`.
    static func updateSchema(_ s: Services, _ req: APIRequest) throws(ParseError) -> HTTPResponse {
        let className = req.param("className")
        guard Naming.isValidClassName(className) else { throw ParseError(.invalidClassName, "invalid class name: \(className)") }
        let body = try req.jsonBody()
        if let idx = body["indexes"] {
            guard let o = idx.objectValue else { throw ParseError(.invalidJSON, "indexes must be an object") }
            try s.store.setIndexes(className, o)
        }
        if let clp = body["classLevelPermissions"] {
            guard let o = clp.objectValue else { throw ParseError(.invalidJSON, "classLevelPermissions must be an object") }
            try s.store.setClassPermissions(className, o)
        }
        return .json(200, JSON.encode(s.store.getSchema(className) ?? .object(["className": .string(className)])))
    }

    /// The endpoint that runs a Lua `cloud.route` (no application id needed).
    static func luaRoute(_ s: Services, method: String, pattern: String) -> Endpoint {
        Endpoint("route:\(method) \(pattern)", access: .open, attemptable: true) { req throws(ParseError) in
            req.target = .route(method: method, pattern: pattern)
            var r = CloudRouteRequest(method: req.http.method == "HEAD" ? "GET" : req.http.method, path: req.http.path,
                                      query: req.http.query, body: req.http.body,
                                      request: s.cloud.request(s.caller(req)))
            r.matched = (method, pattern, req.params)
            do throws(ParseError) {
                guard let out = try s.cloud.runRoute(r, caller: s.caller(req)) else {
                    throw ParseError(.objectNotFound, "no such endpoint: \(req.http.method) \(req.http.path)")
                }
                var headers = out.headers
                if !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
                    headers.append(("Content-Type", "application/json; charset=utf-8"))
                }
                return HTTPResponse(status: out.status, headers: headers, body: out.body)
            } catch {
                // An unhandled error in a route → 500/141; cloud.error(code, …) → its status.
                if error.code == .scriptFailed && error.status == nil {
                    var e = error
                    e.status = 500
                    throw e
                }
                throw error
            }
        }
    }
}

/// `/parse/health`: 200 `{"status":"ok"}` while requests can be served; otherwise 503 with the
/// first problem's status (`saturated`: every worker busy on a long or stuck job; `read-only`:
/// the store cannot write) and its counts, plus every problem in `problems`. Load balancers
/// take a node out on a non-2xx health check, which is what a node in this state needs.
func healthAnswer() -> HTTPResponse {
    let problems = HealthBoard.shared.problems()
    guard let first = problems.first else { return .json(200, Array(#"{"status":"ok"}"#.utf8)) }
    var out = "{\"status\":" + Log.jsonQuote(first.status)
    for (k, v) in first.fields { out += "," + Log.jsonQuote(k) + ":" + v }
    out += ",\"problems\":[" + problems.map { Log.jsonQuote($0.status) }.joined(separator: ",") + "]}"
    return .json(503, Array(out.utf8))
}
