import MoonbaseCore
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota
import MoonbaseStore

/// The dashboard: its static files under `/dashboard` (no keys: they hold no data) and the
/// master-key admin endpoints its screens read (`/admin/logs`, `/admin/calls`, `/admin/classes`,
/// `/admin/cloud`).
///
/// The pages are locked down: a strict Content-Security-Policy (same-origin scripts, styles and
/// requests only, no inline script, no framing), `X-Frame-Options: DENY`, no CORS headers, no
/// cookies (the master key lives in the tab's session storage and travels as a header).
enum DashboardEndpoints {
    static let securityHeaders: [(String, String)] = [
        ("Content-Security-Policy",
         "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
            + "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
        ("X-Frame-Options", "DENY"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-cache"),
    ]

    static func asset(_ name: String) throws(ParseError) -> HTTPResponse {
        guard let a = DashboardAssets.files[name] else {
            throw ParseError(.objectNotFound, "no such dashboard file: \(name)")
        }
        var h: [(String, String)] = [("Content-Type", a.contentType)]
        h.append(contentsOf: securityHeaders)
        return HTTPResponse(status: 200, headers: h, body: a.bytes)
    }

    static func routes(_ s: Services) -> [(String, String, Endpoint)] {
        [
            // The router treats `/dashboard/` as `/dashboard`.
            ("GET", "/dashboard", Endpoint("dashboard", access: .open, inline: true, charged: false) { _ throws(ParseError) in
                try asset("index.html")
            }),
            ("GET", "/dashboard/:file", Endpoint("dashboard", access: .open, inline: true, charged: false) { req throws(ParseError) in
                try asset(req.param("file"))
            }),
            ("GET", "/admin/logs", Endpoint("admin.logs", access: .master) { req throws(ParseError) in
                req.target = .admin("logs")
                return .json(200, JSON.encode(try logsJSON(req)))
            }),
            ("GET", "/admin/calls", Endpoint("admin.calls", access: .master) { req throws(ParseError) in
                req.target = .admin("calls")
                let limit = try intParam(req, "limit", default: 100, max: s.calls.capacity)
                let target = req.http.queryValue("target").flatMap { $0.isEmpty ? nil : $0 }
                let failed = ["1", "true"].contains(req.http.queryValue("failed") ?? "")
                let rows = s.calls.recent(limit: limit, target: target, failed: failed)
                return .json(200, JSON.encode(.object(["results": .array(rows.map(\.json))])))
            }),
            ("GET", "/admin/classes", Endpoint("admin.classes", access: .master) { req throws(ParseError) in
                req.target = .admin("classes")
                return .json(200, JSON.encode(try classesJSON(s)))
            }),
            ("GET", "/admin/cloud", Endpoint("admin.cloud", access: .master) { req throws(ParseError) in
                req.target = .admin("functions")
                return .json(200, JSON.encode(cloudJSON(s)))
            }),
        ]
    }

    static func intParam(_ req: APIRequest, _ name: String, default d: Int, max: Int) throws(ParseError) -> Int {
        guard let v = req.http.queryValue(name), !v.isEmpty else { return d }
        guard let n = Int(v), n >= 0 else { throw ParseError(.invalidQuery, "\(name) must be a non-negative integer") }
        return min(n, max)
    }

    /// `GET /admin/logs?since=&level=&requestId=&limit=`: `since` is the `seq` of the last line
    /// already seen (or an ISO-8601 instant); `level` the lowest level shown (default debug).
    static func logsJSON(_ req: APIRequest) throws(ParseError) -> JSONValue {
        var since: Int64 = 0
        var sinceTime: Int64?
        if let v = req.http.queryValue("since"), !v.isEmpty {
            if let n = Int64(v), n >= 0 {
                since = n
            } else if let t = ISO8601.parse(v) {
                sinceTime = t
            } else {
                throw ParseError(.invalidQuery, "since must be a line number or an ISO-8601 instant")
            }
        }
        var level = LogLevel.debug
        if let v = req.http.queryValue("level"), !v.isEmpty {
            guard let l = [LogLevel.debug, .info, .warn, .error].first(where: { $0.name == v.lowercased() }) else {
                throw ParseError(.invalidQuery, "level must be debug, info, warn or error")
            }
            level = l
        }
        let rid = req.http.queryValue("requestId").flatMap { $0.isEmpty ? nil : $0 }
        let limit = try intParam(req, "limit", default: 1000, max: Log.ring.capacity)
        let r = Log.ring.lines(since: since, sinceTime: sinceTime, minLevel: level, requestId: rid, limit: limit)
        let lines: [JSONValue] = r.lines.map { e in
            var o: JSONObject = [
                "seq": .int(e.seq), "time": .string(ISO8601.format(millis: e.time)), "level": .string(e.level.name),
                "source": .string(e.source), "requestId": e.requestId.map { .string($0) } ?? .null, "msg": .string(e.message),
            ]
            for (k, v) in e.fields where o[k] == nil { o[k] = .string(v) }
            return .object(o)
        }
        return .object(["lines": .array(lines), "last": .int(r.last)])
    }

    /// Every class with its object count, fields, indexes and class-level permissions.
    static func classesJSON(_ s: Services) throws(ParseError) -> JSONValue {
        var out: [JSONValue] = []
        for name in s.store.classNames {
            guard var schema = s.store.getSchema(name)?.objectValue else { continue }
            let q = try FindQuery(className: name, options: ["limit": 0, "count": 1], maxLimit: 1)
            schema["count"] = .int(Int64(try s.objects.find(q, caller: CallerContext(identity: .master)).count ?? 0))
            out.append(.object(schema))
        }
        return .object(["results": .array(out)])
    }

    static func optionsJSON(_ o: CloudFunctionOptions) -> JSONValue {
        var j: JSONObject = [:]
        if o.requireUser { j["requireUser"] = true }
        if o.requireMaster { j["requireMaster"] = true }
        if o.validateMasterKey { j["validateMasterKey"] = true }
        if let v = o.rateLimitPerMinute { j["rateLimit"] = .object(["perMinute": .int(Int64(v))]) }
        if let v = o.timeoutMs { j["timeoutMs"] = .int(v) }
        if let v = o.maxMemoryMB { j["maxMemoryMB"] = .int(v) }
        if let v = o.maxDbOps { j["maxDbOps"] = .int(v) }
        if let v = o.maxInstructions { j["maxInstructions"] = .int(v) }
        if !o.fields.isEmpty {
            j["fields"] = .array(o.fields.map { f in
                var fj: JSONObject = ["name": .string(f.name), "required": .bool(f.required)]
                if let t = f.type { fj["type"] = .string(t) }
                return .object(fj)
            })
        }
        return .object(j)
    }

    /// The live generation in detail: each handler with its options and file:line.
    static func cloudJSON(_ s: Services) -> JSONValue {
        let gen = s.cloud.generation
        let reg = gen.registry
        func handler(_ h: CloudHandlerInfo) -> JSONValue {
            .object(["name": .string(h.name), "options": optionsJSON(h.options),
                     "at": h.location.map { .string($0.description) } ?? .null])
        }
        return .object([
            "generation": .int(Int64(gen.id)),
            "files": .array(gen.sources.map { .object(["name": .string($0.file), "bytes": .int(Int64($0.text.utf8.count))]) }),
            "functions": .array(reg.functions.values.sorted { $0.name < $1.name }.map(handler)),
            "jobs": .array(reg.jobs.values.sorted { $0.name < $1.name }.map(handler)),
            "triggers": .array(reg.triggers.values.sorted { $0.name < $1.name }.map(handler)),
            "routes": .array(reg.routes.map { r in
                .object(["method": .string(r.method), "path": .string(r.path), "options": optionsJSON(r.options),
                         "at": r.location.map { .string($0.description) } ?? .null])
            }),
            "errors": .object(JSONObject(s.cloud.loadErrors.sorted { $0.key < $1.key }.map { .init($0.key, .string($0.value)) })),
        ])
    }
}
