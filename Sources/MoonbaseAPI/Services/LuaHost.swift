import MoonbaseAuth
import MoonbaseCore
import MoonbaseJSON
import MoonbaseLua
import MoonbaseOutbound
import MoonbaseRealtime
import MoonbaseStore

/// The `db`, `files` and `auth` namespaces of Cloud Code, over the object
/// service: the same permissions, triggers and transactions as REST. `db.*` runs with the
/// caller's identity unless the options table says `master = true`. Also `http.request`
/// (outbound HTTP through MoonbaseOutbound) and `config.get` (Parse Config).
struct LuaHost: CloudHostAPI {
    unowned(unsafe) let service: CloudService
    // `unowned(unsafe)`: the CloudService owns every VM (through its thread slots) and outlives
    // them; a strong reference would make a cycle. Sendable: CloudService is Sendable.

    init(service: CloudService) { self.service = service }

    func call(_ namespace: String, _ name: String, _ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> JSONValue {
        switch try answer(namespace, name, args, ctx) {
        case .value(let v): return v
        case .json(let bytes, let className):
            let v = try JSON.parse(bytes)
            return className.map { LuaObjects.tagged(v, $0) } ?? v
        }
    }

    func callEnded(_ ctx: LuaCallContext) { service.objects.store.releaseReads() }

    func answer(_ namespace: String, _ name: String, _ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> HostAnswer {
        switch namespace {
        case "db": return try db(name, args, ctx)
        case "files": return .value(try filesCall(name, args))
        case "auth": return .value(try authCall(name, args))
        case "http": return .value(try httpRequest(args, ctx))
        case "config":
            guard let services = service.services else { throw ParseError.internalError("services not ready") }
            return .value(try services.parseConfig.get(try string(args, 0, "config.get: the name")) ?? .null)
        default: throw ParseError(.scriptFailed, "unknown namespace \(namespace)")
        }
    }

    func arg(_ args: [LuaValue], _ i: Int) -> JSONValue? {
        guard i < args.count, let v = args[i].json, !v.isNull else { return nil }
        return v
    }

    func string(_ args: [LuaValue], _ i: Int, _ what: String) throws(ParseError) -> String {
        guard let s = arg(args, i)?.stringValue else { throw ParseError(.scriptFailed, "\(what) must be a string") }
        return s
    }

    /// The caller for a `db.*` call: the outer request's caller (user, request id, meter), with
    /// the Lua call's identity, or master when asked.
    func caller(_ ctx: LuaCallContext, _ opts: JSONObject) -> CallerContext {
        var c = service.callers.value.caller ?? CallerContext(identity: ctx.identity)
        c.identity = ctx.identity
        if let u = ctx.user?.objectValue { c.user = u }
        if opts["master"]?.boolValue == true { c.identity = .master }
        return c
    }

    /// `db.*`. Objects read (`get`, `find`, `first`) go to Lua as the JSON text the store wrote,
    /// tagged with their `className` by the bridge: no parse and re-encode on the way.
    func db(_ name: String, _ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> HostAnswer {
        let objects = service.objects
        if name == "transaction" {
            guard let fn = args.first?.function else { throw ParseError(.scriptFailed, "db.transaction needs a function") }
            return .value(try objects.store.transaction { () throws(ParseError) -> JSONValue in
                try ctx.vm.holdingWriter(service.limits.functions) { () throws(ParseError) -> JSONValue in
                    try ctx.vm.call(fn, [])
                }
            })
        }
        let className = try string(args, 0, "class name")
        switch name {
        case "get", "find", "first", "count", "distinct":
            // A call's reads share one read transaction while nothing commits (callEnded ends it).
            objects.store.holdReads()
        default: break
        }
        switch name {
        case "get":
            let id = try string(args, 1, "objectId")
            let opts = arg(args, 2)?.objectValue ?? [:]
            let (keys, include) = try keysInclude(opts)
            do {
                let bytes = try objects.get(className, id, keys: keys, include: include, caller: caller(ctx, opts))
                return .json(bytes, className: className)
            } catch where error.code == .objectNotFound {
                return .value(.null)
            }
        case "find", "first":
            let opts = arg(args, 2)?.objectValue ?? [:]
            let c = caller(ctx, opts)
            let r: FindResult
            if let plain = try equalityFind(name, className, arg(args, 1), opts, c) {
                r = plain
            } else {
                var o = opts
                if let w = LuaObjects.pointers(arg(args, 1)) { o["where"] = w }
                o.removeValue(forKey: "master")
                o.removeValue(forKey: "triggers")
                if name == "first" { o["limit"] = .int(1) }
                let q = try FindQuery(className: className, options: o, maxLimit: FindQuery.luaMaxLimit)
                r = try objects.find(q, caller: c)
            }
            if name == "find" { return .json(r.results, className: className) }
            switch r.resultCount {
            case 0: return .value(.null)
            case 1: return .json(Array(r.results.dropFirst().dropLast()), className: className)   // `[obj]` without its brackets
            default:   // an afterFind trigger may return more objects than asked for
                return .value(LuaObjects.tagged(try JSON.parse(r.results), className).arrayValue?.first ?? .null)
            }
        case "changes":
            return .value(try changes(className, args, ctx))
        default:
            return .value(try dbOther(name, className, args, ctx))
        }
    }

    /// `db.find`/`db.first` whose `where` holds only `field = scalar` equalities and whose options
    /// are at most `master` (and a positive `limit` for `find`): the store's cached statement for
    /// the query's shape when it has one (`ObjectService.findEqual`), else nil (the general find
    /// answers the same).
    func equalityFind(_ name: String, _ className: String, _ whereValue: JSONValue?, _ opts: JSONObject,
                      _ c: CallerContext) throws(ParseError) -> FindResult? {
        var limit = name == "first" ? 1 : FindQuery.defaultLimit
        for e in opts.entries {
            switch e.key {
            case "master": continue
            case "limit" where name == "find":
                guard case .int(let n) = e.value, n > 0 else { return nil }
                limit = Int(min(n, Int64(FindQuery.luaMaxLimit)))
            default: return nil
            }
        }
        let equal: JSONObject
        switch whereValue {
        case nil: equal = [:]
        case .object(let o)?: equal = o
        default: return nil
        }
        return try service.objects.findEqual(className, equal, limit: limit, caller: c)
    }

    /// The other `db.*` functions on one class: counts, distinct values and writes.
    func dbOther(_ name: String, _ className: String, _ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> JSONValue {
        let objects = service.objects
        switch name {
        case "count":
            let opts = arg(args, 2)?.objectValue ?? [:]
            return .int(Int64(try objects.count(className, where: LuaObjects.pointers(arg(args, 1)), caller: caller(ctx, opts))))
        case "distinct":
            let field = try string(args, 1, "field")
            let opts = arg(args, 3)?.objectValue ?? [:]
            return .array(try objects.distinct(className, field: field, where: LuaObjects.pointers(arg(args, 2)), caller: caller(ctx, opts)))
        case "create":
            let fields = LuaObjects.untagged(arg(args, 1)?.objectValue ?? [:], className)
            let opts = arg(args, 2)?.objectValue ?? [:]
            let c = caller(ctx, opts)
            if className == "_User" {
                // Users are created through sign-up so the password is hashed (argon2id) and
                // never stored as given; no session is returned to Lua.
                guard let services = service.services else { throw ParseError.internalError("services not ready") }
                let r = try services.signUp(fields, caller: c)
                return .object(LuaObjects.tagged(try service.auth.getUser(r.userId, identity: c.identity), className))
            }
            let o = try objects.create(className, fields, caller: c)
            return .object(LuaObjects.tagged(try o.json(for: c.identity), className))
        case "update":
            let id = try string(args, 1, "objectId")
            let changes = LuaObjects.untagged(arg(args, 2)?.objectValue ?? [:], className)
            let opts = arg(args, 3)?.objectValue ?? [:]
            let c = caller(ctx, opts)
            if className == "_User" {
                // Same rules as REST: currentPassword for email/password changes (unless master),
                // password hashed, other sessions revoked on a password change.
                _ = try service.services?.updateUser(id, changes, caller: c, sessionId: nil)
                return .object(LuaObjects.tagged(try service.auth.getUser(id, identity: c.identity), className))
            }
            let o = try objects.update(className, id, changes, caller: c)
            return .object(LuaObjects.tagged(try o.json(for: c.identity), className))
        case "delete":
            let id = try string(args, 1, "objectId")
            let opts = arg(args, 2)?.objectValue ?? [:]
            if className == "_User", let services = service.services {
                try services.deleteUser(id, caller: caller(ctx, opts))
                return .bool(true)
            }
            try objects.delete(className, id, caller: caller(ctx, opts))
            return .bool(true)
        case "deleteWhere":
            let opts = arg(args, 2)?.objectValue ?? [:]
            let c = caller(ctx, opts)
            let n = try objects.deleteWhere(className, where: LuaObjects.pointers(arg(args, 1)), runTriggers: opts["triggers"]?.boolValue ?? true, caller: c)
            return .int(Int64(n))
        case "updateWhere":
            let changes = LuaObjects.untagged(arg(args, 2)?.objectValue ?? [:], className)
            let opts = arg(args, 3)?.objectValue ?? [:]
            let c = caller(ctx, opts)
            let n = try objects.updateWhere(className, where: LuaObjects.pointers(arg(args, 1)), changes: changes,
                                            runTriggers: opts["triggers"]?.boolValue ?? true, caller: c)
            return .int(Int64(n))
        default:
            throw ParseError(.scriptFailed, "unknown function db.\(name)")
        }
    }

    func keysInclude(_ opts: JSONObject) throws(ParseError) -> ([String]?, [String]) {
        func list(_ v: JSONValue?) -> [String]? {
            if let s = v?.stringValue { return s.split(separator: ",").map(String.init) }
            if let a = v?.arrayValue { return a.compactMap(\.stringValue) }
            return nil
        }
        return try ClassesEndpoints.validated(keys: list(opts["keys"]), include: list(opts["include"]) ?? [])
    }

    func filesCall(_ name: String, _ args: [LuaValue]) throws(ParseError) -> JSONValue {
        guard name == "delete" else { throw ParseError(.scriptFailed, "unknown function files.\(name)") }
        let v = arg(args, 0)
        guard let stored = v?.stringValue ?? v?["name"]?.stringValue else {
            throw ParseError(.scriptFailed, "files.delete needs a File value or a file name")
        }
        return .bool(try service.files.delete(stored))
    }

    func userId(_ v: JSONValue?) throws(ParseError) -> String {
        if let s = v?.stringValue { return s }
        if let s = v?["objectId"]?.stringValue { return s }
        throw ParseError(.scriptFailed, "expected a user (object or objectId)")
    }

    func authCall(_ name: String, _ args: [LuaValue]) throws(ParseError) -> JSONValue {
        switch name {
        case "verifyPassword":
            let id = try userId(arg(args, 0))
            guard let password = arg(args, 1)?.stringValue else { return .bool(false) }
            return .bool(try service.auth.verifyPassword(userId: id, password: password))
        case "revokeSessions":
            return .int(Int64(try service.auth.revokeSessions(userId: try userId(arg(args, 0)))))
        default:
            throw ParseError(.scriptFailed, "unknown function auth.\(name)")
        }
    }

    /// `http.request{method, url, headers, body | json, timeoutMs}` → `{status, headers, body, json}`.
    /// Runs here, on the worker running the call; bounded by the call's remaining wall time (and
    /// aborted when the watchdog kills the call). Refused while the call holds the writer.
    func httpRequest(_ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> JSONValue {
        func bad(_ m: String) -> ParseError { ParseError(.scriptFailed, "http.request: " + m) }
        guard let services = service.services else { throw ParseError.internalError("services not ready") }
        guard args.count == 1, let o = arg(args, 0)?.objectValue else {
            throw bad("expected one table {method, url, headers, body | json, timeoutMs}")
        }
        if services.store.inTransaction {
            throw bad("not allowed while holding the writer (inside a trigger or db.transaction): "
                      + "call it from the function or route, before or after its writes")
        }
        let cap = services.config.httpMaxRequestsPerCall
        guard ctx.counters.httpRequests < cap else { throw bad("at most \(cap) requests per call") }
        for k in o.map(\.key) where !["method", "url", "headers", "body", "json", "timeoutMs"].contains(k) {
            throw bad("unknown option '\(k)'")
        }
        guard let url = o["url"]?.stringValue else { throw bad("url must be a string") }
        let method = (o["method"]?.stringValue ?? "GET").uppercased()
        guard ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"].contains(method) else {
            throw bad("unknown method '\(method)'")
        }
        var headers: [(String, String)] = []
        if let h = o["headers"], !(h.arrayValue?.isEmpty ?? false) {
            guard let ho = h.objectValue else { throw bad("headers must be a table of strings") }
            for e in ho {
                switch e.value {
                case .string(let v): headers.append((e.key, v))
                case .int(let i): headers.append((e.key, String(i)))
                default: throw bad("header \(e.key) must be a string")
                }
            }
        }
        var body: [UInt8]?
        if let j = o["json"] {
            guard o["body"] == nil else { throw bad("give body or json, not both") }
            body = JSON.encode(j)
            if !headers.contains(where: { $0.0.lowercased() == "content-type" }) { headers.append(("Content-Type", "application/json")) }
        } else if let b = o["body"] {
            guard let text = b.stringValue else { throw bad("body must be a string") }
            body = Array(text.utf8)
        }
        var timeout: Int64 = 10_000
        if let t = o["timeoutMs"] {
            guard let i = t.intValue, i > 0 else { throw bad("timeoutMs must be a positive integer") }
            timeout = i
        }
        if let left = ctx.vm.callRemainingMillis { timeout = min(timeout, max(left, 1)) }
        ctx.counters.httpRequests += 1
        let vm = ctx.vm
        let response: OutboundResponse
        do throws(OutboundFailure) {
            response = try OutboundHTTP.perform(
                OutboundRequest(method: method, url: url, headers: headers, body: body, timeoutMs: timeout),
                policy: services.outboundPolicy, shouldAbort: { vm.callRemainingMillis == 0 })
        } catch {
            throw bad(error.message)
        }
        var hs = JSONObject()
        for (k, v) in response.headers {
            if let prev = hs[k]?.stringValue { hs[k] = .string(prev + ", " + v) } else { hs[k] = .string(v) }
        }
        var out: JSONObject = ["status": .int(Int64(response.status)), "headers": .object(hs),
                               "body": .string(String(decoding: response.body, as: UTF8.self))]
        let type = hs["content-type"]?.stringValue?.lowercased() ?? ""
        if type.contains("json"), let j = try? JSON.parse(response.body) { out["json"] = j }
        return .object(out)
    }
}

extension LuaHost {
    /// `db.changes(Class, since, {limit, where, keys, master})` → `{results = {…}, next = SEQ}`:
    /// the change feed read as the caller (or master), the rows of `GET /parse/changes/CLASS`.
    func changes(_ className: String, _ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> JSONValue {
        guard let services = service.services else { throw ParseError.internalError("services are not ready") }
        var since: Int64 = 0
        if let v = arg(args, 1) {
            guard let n = v.intValue ?? v.doubleValue.flatMap({ $0 == $0.rounded() ? Int64(exactly: $0) : nil }), n >= 0 else {
                throw ParseError(.invalidQuery, "since must be a non-negative sequence number")
            }
            since = n
        }
        let opts = arg(args, 2)?.objectValue ?? [:]
        var limit = 100
        if let l = opts["limit"] {
            guard let n = l.intValue, n >= 0 else { throw ParseError(.invalidQuery, "limit must be a non-negative integer") }
            limit = Int(min(n, 1000))
        }
        var keys: [String]?
        switch opts["keys"] {
        case .string(let s)?: keys = s.split(separator: ",").map(String.init)
        case .array(let a)?: keys = a.compactMap(\.stringValue)
        default: break
        }
        let c = caller(ctx, opts)
        let viewer: Viewer = c.identity.isMaster ? .master : Viewer(identity: c.identity)
        c.meter?.dbReads += 1
        let page = try services.realtime.hub.changes(className, since: since, limit: max(limit, 1), where: opts["where"],
                                                     keys: keys, viewer: viewer)
        return RealtimeEndpoints.changesBody(page, className: className, limit: limit)
    }
}
