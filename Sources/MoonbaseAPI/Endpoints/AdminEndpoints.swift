import MoonbaseCore
import MoonbaseCron
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota
import MoonbaseStore

/// `/admin/*` (master key): Cloud Code files (deploy, list, delete), jobs, usage.
enum AdminEndpoints {
    static func routes(_ s: Services, usage: any UsageStore) -> [(String, String, Endpoint)] {
        fileRoutes(s, pattern: "/admin/functions/:file", prefix: "") + fileRoutes(s, pattern: "/admin/functions/lib/:file", prefix: "lib/") + [
            ("GET", "/admin/functions", Endpoint("admin.functions.list", access: .masterOnly) { req throws(ParseError) in
                req.target = .admin("functions")
                return .json(200, JSON.encode(functionsJSON(s)))
            }),
            ("GET", "/admin/jobs", Endpoint("admin.jobs", access: .masterOnly) { req throws(ParseError) in
                req.target = .admin("jobs")
                return .json(200, JSON.encode(try jobsJSON(s)))
            }),
            ("GET", "/admin/usage", Endpoint("admin.usage", access: .masterOnly) { req throws(ParseError) in
                req.target = .admin("usage")
                guard let by = UsageGrouping(query: req.http.queryValue("by")) else {
                    throw ParseError(.invalidQuery, "by must be account, function, hour, day or month")
                }
                guard let range = UsageReport.range(from: req.http.queryValue("from"), to: req.http.queryValue("to"),
                                                    now: s.clock.nowMillis())
                else { throw ParseError(.invalidQuery, "from/to must be ISO-8601 dates with from before to") }
                // `account=KEY` or `function=KEY` with a time grouping: that one series per hour/day/month.
                var series: (kind: UsageKind, key: String)?
                for kind in [UsageKind.account, .function] {
                    guard let key = req.http.queryValue(kind.rawValue), !key.isEmpty else { continue }
                    guard series == nil, [.hour, .day, .month].contains(by) else {
                        throw ParseError(.invalidQuery, "account= or function= (one of them) goes with by=hour, day or month")
                    }
                    series = (kind, key)
                }
                try s.flushUsage()
                let report = try usage.usageReport(from: range.from, to: range.to, by: by, series: series)
                return .json(200, JSON.encode(report.json))
            }),
        ]
    }

    /// GET/PUT/DELETE of one Cloud Code file: `name.lua` at the top of the functions folder, or a
    /// module `lib/name.lua` (prefix "lib/").
    static func fileRoutes(_ s: Services, pattern: String, prefix: String) -> [(String, String, Endpoint)] {
        [
            ("GET", pattern, Endpoint("admin.functions.get", access: .masterOnly) { req throws(ParseError) in
                req.target = .admin("functions")
                let file = prefix + (try luaFileName(req.param("file")))
                let text: String?
                if s.store.storesCodeBundles, let bundle = try s.store.codeBundle() {
                    text = bundle.files.first { $0.file == file }?.text
                } else {
                    text = FileSystem.readFile(s.config.functionsDir + "/" + file).map { String(decoding: $0, as: UTF8.self) }
                }
                guard let text else { throw ParseError(.objectNotFound, "no such file: \(file)") }
                return .text(200, text, contentType: "text/x-lua; charset=utf-8")
            }),
            ("PUT", pattern, Endpoint("admin.functions.put", access: .masterOnly) { req throws(ParseError) in
                req.target = .admin("functions")
                let file = prefix + (try luaFileName(req.param("file")))
                let text = String(decoding: req.http.body, as: UTF8.self)
                if s.store.storesCodeBundles {
                    try deployShared(s, { (files) throws(ParseError) in
                        (files.filter { $0.file != file } + [(file: file, text: text)]).sorted { $0.file < $1.file }
                    }, then: { () throws(ParseError) in
                        // This host's folder follows (the bundle is what every host serves).
                        if !prefix.isEmpty { try FileSystem.makeDirectories(s.config.functionsDir + "/" + String(prefix.dropLast())) }
                        try FileSystem.writeFile(s.config.functionsDir + "/" + file, Array(req.http.body))
                    })
                    return .json(200, JSON.encode(functionsJSON(s)))
                }
                // Load the candidate generation first; only a generation that loads is written
                // (under the load lock, so a folder reload cannot slip in between).
                let errors = try s.cloud.code.exclusively { (load) throws(ParseError) -> [String: String] in
                    var sources = CloudCode.readSources(s.config.functionsDir).filter { $0.file != file }
                    sources.append((file: file, text: text))
                    sources.sort { $0.file < $1.file }
                    let errors = load(sources)
                    if errors.isEmpty {
                        if !prefix.isEmpty { try FileSystem.makeDirectories(s.config.functionsDir + "/" + String(prefix.dropLast())) }
                        try FileSystem.writeFile(s.config.functionsDir + "/" + file, Array(req.http.body))
                    }
                    return errors
                }
                if !errors.isEmpty {
                    throw ParseError(.scriptFailed, errors.sorted { $0.key < $1.key }.map { "\($0.value)" }.joined(separator: "; "))
                }
                return .json(200, JSON.encode(functionsJSON(s)))
            }),
            ("DELETE", pattern, Endpoint("admin.functions.delete", access: .masterOnly) { req throws(ParseError) in
                req.target = .admin("functions")
                let file = prefix + (try luaFileName(req.param("file")))
                if s.store.storesCodeBundles {
                    try deployShared(s, { (files) throws(ParseError) in
                        guard files.contains(where: { $0.file == file }) else { throw ParseError(.objectNotFound, "no such file: \(file)") }
                        return files.filter { $0.file != file }
                    }, then: { () throws(ParseError) in _ = FileSystem.remove(s.config.functionsDir + "/" + file) })
                    return .json(200, JSON.encode(functionsJSON(s)))
                }
                let path = s.config.functionsDir + "/" + file
                guard FileSystem.exists(path) else { throw ParseError(.objectNotFound, "no such file: \(file)") }
                let errors = try s.cloud.code.exclusively { (load) throws(ParseError) -> [String: String] in
                    let errors = load(CloudCode.readSources(s.config.functionsDir).filter { $0.file != file })
                    if errors.isEmpty { _ = FileSystem.remove(path) }
                    return errors
                }
                if !errors.isEmpty {
                    throw ParseError(.scriptFailed, errors.values.sorted().joined(separator: "; "))
                }
                return .json(200, JSON.encode(functionsJSON(s)))
            }),
        ]
    }

    /// A deploy when the store keeps the code for every host: the new file set is computed from
    /// the stored bundle (the first deploy starts from this host's folder), loaded here first,
    /// and stored only if it loads (the other hosts then load it on notification); `then` runs
    /// after it was stored. All under the load lock, so no reload chosen earlier (the folder, an
    /// older bundle) can slip in between.
    static func deployShared(_ s: Services, _ change: ([(file: String, text: String)]) throws(ParseError) -> [(file: String, text: String)],
                             then: () throws(ParseError) -> Void) throws(ParseError) {
        let errors = try s.cloud.code.exclusively { (load) throws(ParseError) -> [String: String] in
            var errors: [String: String] = [:]
            do throws(ParseError) {
                try s.store.updateCodeBundle(base: CloudCode.readSources(s.config.functionsDir)) { (files) throws(ParseError) in
                    let next = try change(files)
                    errors = load(next)
                    if !errors.isEmpty { throw ParseError(.scriptFailed, "refused") }
                    return next
                }
                try then()
            } catch {
                // A candidate that did not load is not stored: the serving generation stays.
                if errors.isEmpty { throw error }
            }
            return errors
        }
        if !errors.isEmpty {
            throw ParseError(.scriptFailed, errors.sorted { $0.key < $1.key }.map { "\($0.value)" }.joined(separator: "; "))
        }
    }

    /// `name.lua`, nothing else (no path separators, no hidden files).
    static func luaFileName(_ f: String) throws(ParseError) -> String {
        let ok = f.hasSuffix(".lua") && f.utf8.count <= 128 && f.utf8.first != UInt8(ascii: ".")
            && f.utf8.allSatisfy(FileStore.isSafeNameByte)
        guard ok else { throw ParseError(.invalidFileName, "invalid Lua file name: \(f)") }
        return f
    }

    static func functionsJSON(_ s: Services) -> JSONValue {
        let gen = s.cloud.generation
        let reg = gen.registry
        func loc(_ l: Any?) -> JSONValue { l.map { .string("\($0)") } ?? .null }
        return .object([
            "generation": .int(Int64(gen.id)),
            "files": .array(gen.sources.map { .string($0.file) }),
            "functions": .array(reg.functions.keys.sorted().map { .string($0) }),
            "jobs": .array(reg.jobs.keys.sorted().map { .string($0) }),
            "routes": .array(reg.routes.map { .string("\($0.method) \($0.path)") }),
            "triggers": .array(reg.triggers.keys.sorted().map { .string($0) }),
            "errors": .object(JSONObject(s.cloud.loadErrors.sorted { $0.key < $1.key }.map { .init($0.key, .string($0.value)) })),
        ])
    }

    static func jobsJSON(_ s: Services) throws(ParseError) -> JSONValue { try AdminJobs.json(s) }
}

/// The jobs listing shared by `GET /admin/jobs` and `moonbase jobs`.
public enum AdminJobs {
    public static func json(_ s: Services) throws(ParseError) -> JSONValue {
        let listing = s.jobs.scheduler.listing()
        var out: [JSONValue] = []
        for l in listing {
            var o = l.json.objectValue ?? [:]
            o["lastRun"] = try lastRun(s, job: l.job)
            out.append(.object(o))
        }
        return .object(["schedules": .array(out), "jobs": .array(s.cloud.registry.jobs.keys.sorted().map { .string($0) })])
    }

    static func lastRun(_ s: Services, job: String) throws(ParseError) -> JSONValue {
        guard s.store.schema("_JobStatus") != nil else { return .null }
        let q = try MoonbaseStore.FindQuery(className: "_JobStatus", options: [
            "where": ["jobName": .string(job)], "order": "-createdAt", "limit": 1,
        ], maxLimit: 1)
        let r = try s.objects.find(q, caller: CallerContext(identity: .master))
        return try JSON.parse(r.results).arrayValue?.first ?? .null
    }
}

extension Services {
    /// Writes pending usage now (reports read SQLite).
    func flushUsage() throws(ParseError) {
        guard let f = usageFlusher else { return }
        do { _ = try f.flushNow() } catch { throw ParseError.internalError("usage flush: \(error)") }
    }
}
