import MoonbaseAuth
import MoonbaseCore
import MoonbaseCrypto
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota
import MoonbaseStore
import Synchronization

/// The HTTP handler of the whole product: routes, keys, sessions, idempotency, quota and
/// accounting around every endpoint (the only place that wires HTTP to the other modules).
///
/// Thread-safety: immutable after init except the Lua route table, which is swapped whole under
/// a mutex on hot reload (readers copy the value out).
public final class API: HTTPHandler {
    public let services: Services
    let parseRoutes: Router<Endpoint>
    let luaRoutes = Mutex(Router<Endpoint>())
    let cors: CORSPolicy

    public init(services: Services) throws(ParseError) {
        self.services = services
        cors = CORSPolicy(origins: services.config.corsOrigins)
        var r = Router<Endpoint>()
        do {
            // The dashboard's pages and admin endpoints join the built-in ones.
            for (method, pattern, endpoint) in API.parseEndpoints(services) + DashboardEndpoints.routes(services) {
                try r.add(method, pattern, endpoint)
            }
        } catch {
            throw ParseError.internalError("route table: \(error)")
        }
        parseRoutes = r
    }

    /// Replaces the Lua routes (hot reload).
    public func setLuaRoutes(_ routes: Router<Endpoint>) {
        luaRoutes.withLock { $0 = routes }
    }

    func route(_ method: String, _ path: String) -> RouteMatch<Endpoint>? {
        // CONNECT asks for a tunnel: a 2xx answer would turn the connection into one (no
        // Content-Length, raw bytes after the head). No route serves it, not even the any-method
        // health check or a Lua route declared with "*", so it is answered 405 like an unknown method.
        if method == "CONNECT" { return nil }
        if let m = parseRoutes.match(method: method, path: path) { return m }
        let lua = luaRoutes.withLock { $0 }
        return lua.match(method: method, path: path)
    }

    // MARK: HTTPHandler

    public func bodyLimit(method: String, path: String) -> Int {
        path.hasPrefix("/parse/files/") ? services.config.maxFileBytes : services.config.maxBodyBytes
    }

    public func runsInline(_ request: HTTPRequest) -> Bool {
        route(request.method, request.path)?.value.inline ?? true
    }

    /// Rewrites what the Parse SDKs send into the plain REST shape, matches the route once, on
    /// the I/O thread, and hands the match to `handle` in the note.
    public func dispatch(_ request: inout HTTPRequest) -> Bool {
        RealtimeEndpoints.liftQueryCredentials(&request)
        SDKRequest.normalize(&request)
        let m = request.method == "OPTIONS" ? nil : route(request.method, request.path)
        // Whether it is a read of local data is asked twice on this thread (`wantsAttempt`,
        // `cpuBound`): answered once here.
        let localRead = m.map { $0.value.attemptable && API.readEndpoints.contains($0.value.name) && readsInline($0) } ?? false
        // Whether it joins a write batch is asked up to three times (`batches`, `wantsAttempt`,
        // `attempt`): answered once here too.
        let batched = m.map(writesInBatch) ?? false
        let prepared = batched ? m.flatMap { preparedCreate($0, request) } : nil
        request.note = RoutedNote(m, localRead: localRead, batched: batched, prepared: prepared)
        return m?.value.inline ?? true
    }

    /// A create that will join a batch, validated here on the I/O thread (`PreparedInsert`): the
    /// batch holds the writer for every step of each create it runs, so the steps that need no
    /// database (the body parsed, its fields checked, its objectId and text made) are taken out
    /// of it. nil for anything else, and for a body that fails to parse or validate: the create
    /// then runs from the body and answers that error in the same words.
    func preparedCreate(_ m: RouteMatch<Endpoint>, _ request: HTTPRequest) -> PreparedCreate? {
        guard m.value.name == "classes.create", let fields = try? APIRequest.jsonObject(request.body),
              let insert = try? PreparedInsert(className: API.className(m), fields: fields) else { return nil }
        let location = ClassesEndpoints.createdLocation(services.baseURL(request), className: insert.className,
                                                        objectId: insert.objectId)
        return PreparedCreate(insert: insert, location: location)
    }

    public func handle(_ request: HTTPRequest) -> HTTPResponse {
        let response = respond(request, attempt: false)!
        // An attempt that moved here left its call suspended on this worker's VM; if the request
        // took another path this time (refused before its Lua ran), that call is dropped.
        services.cloud.discardPending()
        return response
    }

    /// Function and route calls by anonymous callers (no session to resolve, no request id to
    /// record) may start on the I/O thread: nothing before their Lua blocks or writes.
    public func wantsAttempt(_ request: HTTPRequest) -> Bool {
        guard let note = request.note as? RoutedNote, let m = note.match, m.value.attemptable else { return false }
        if API.readEndpoints.contains(m.value.name) { return note.localRead }
        if request.header("x-parse-session-token") != nil || request.header("authorization") != nil { return false }
        if request.method != "GET", request.header("x-parse-request-id") != nil { return false }
        if m.value.name == "classes.create" { return note.batched }
        return true
    }

    /// REST writes of one object that share a transaction with those that arrive beside them
    /// (group commit, see `handleBatch`): creates, updates and deletes in a class of the app (not
    /// `_User`, whose sign-up hashes a password, nor another `_` class) on the SQLite store (its
    /// database calls do not leave the process), without save or delete triggers (Lua inside the
    /// shared transaction would hold every other write of the batch). Such a create, anonymous
    /// and without a request id, is attempted on the I/O thread while no batch is under way: it
    /// takes the writer there only if it is free (see `Database.write`), else it joins the next
    /// batch.
    public func batches(_ request: HTTPRequest) -> Bool {
        (request.note as? RoutedNote)?.batched ?? false
    }

    func writesInBatch(_ m: RouteMatch<Endpoint>) -> Bool {
        let before: TriggerKind, after: TriggerKind
        switch m.value.name {
        case "classes.create", "classes.update": (before, after) = (.beforeSave, .afterSave)
        case "classes.delete": (before, after) = (.beforeDelete, .afterDelete)
        default: return false
        }
        guard services.store is SQLiteDocumentStore else { return false }
        let className = API.className(m)
        guard let first = className.utf8.first, first != UInt8(ascii: "_") else { return false }
        if let t = services.objects.triggers, t.hasTrigger(before, className) || t.hasTrigger(after, className) {
            return false
        }
        return true
    }

    /// The `:className` a route captured ("" for none).
    static func className(_ m: RouteMatch<Endpoint>) -> String {
        m.params.first { $0.0 == "className" }?.1 ?? ""
    }

    /// Group commit: the writes of a batch run one after another in one write transaction,
    /// each in a savepoint of its own, and are all answered after its one commit. A request
    /// answered with an error (a 4xx or 5xx: a bad field, an ACL refusal, a duplicate request
    /// id) has its savepoint rolled back, so it fails alone and leaves nothing behind. If the
    /// commit itself fails, nothing of the batch is kept and every request of it gets that error.
    ///
    /// What it saves: each commit appends every page it changed to the WAL, and a create
    /// changes about ten (the table, its indexes, the geo index, the change feed); writes in
    /// one transaction share the pages they have in common (the tail of each append-only
    /// index) and the commit's own costs (WAL header, locks, a wake-up per writer).
    public func handleBatch(_ requests: [HTTPRequest]) -> [HTTPResponse] {
        guard requests.count > 1, let store = services.store as? SQLiteDocumentStore else {
            return requests.map { handle($0) }
        }
        var responses: [HTTPResponse] = []
        responses.reserveCapacity(requests.count)
        defer { services.cloud.discardPending() }
        do throws(ParseError) {
            try store.groupCommit(requests.count) { i in
                let response = respond(requests[i], attempt: false)!
                responses.append(response)
                return response.status < 400
            }
        } catch {
            Log.error("a batch of \(requests.count) writes failed to commit: \(error.underlying ?? error.message)")
            return requests.map { _ in .error(error) }
        }
        return responses
    }

    /// A read is attempted only while the pool holds long calls (scripts spinning at their
    /// limits or waiting on something): queued, it could wait behind them (I1, four scripts
    /// spinning on four workers: REST reads by id took up to 240–290 ms, p99 8–10 ms; attempted,
    /// at most 6 ms, p99 1–3 ms). Otherwise it goes to a worker as before, because attempting
    /// every read costs more at saturation (W3s, 32 connections on two cores: 135–177 against
    /// 129–160 µs of server CPU per request; the hop costs no wake-up when workers are busy,
    /// while answers sent from the I/O thread one by one each wake the client) and saves only
    /// about a tenth at a light load (one connection: 197–238 against 233–273 µs).
    public func attemptsOnlyBesideLongCalls(_ request: HTTPRequest) -> Bool {
        guard let note = request.note as? RoutedNote, let m = note.match else { return false }
        return API.readEndpoints.contains(m.value.name)
    }

    /// A find or get of local data (`readsInline`: the SQLite store, no `afterFind` trigger)
    /// runs on the CPU from start to end: the pool runs no more of them at once than it has
    /// CPU slots (one per core), so that they do not slice the cores between them.
    public func cpuBound(_ request: HTTPRequest) -> Bool {
        (request.note as? RoutedNote)?.localRead ?? false
    }

    /// REST reads that may start on the I/O thread (see `readsInline`).
    static let readEndpoints: Set<String> = ["classes.find", "classes.get"]

    /// How long a read attempted on an I/O thread may run there before it is cut short and run
    /// again by a worker: the same budget as a Lua call's attempt.
    static let readAttemptBudgetNanos: UInt64 = UInt64(CloudService.attemptBudgetNanos)

    /// While long calls hold workers (`attemptsOnlyBesideLongCalls`), a find or get is attempted
    /// on the I/O thread when it only reads local data: the SQLite
    /// store (PostgreSQL reads leave the process), a class without an `afterFind` trigger (Lua
    /// runs on a worker's VM). Sessions are resolved there too: that is reads and a cache. The
    /// reads run under `readAttemptBudgetNanos`; a read that takes longer (an unindexed scan)
    /// is interrupted and a worker runs it again, so one connection's slow query costs the
    /// others on its I/O thread at most that budget. Included classes with an `afterFind`
    /// trigger send the request to a worker when the includes are expanded.
    func readsInline(_ m: RouteMatch<Endpoint>) -> Bool {
        guard services.store is SQLiteDocumentStore else { return false }
        if let t = services.objects.triggers, t.hasTrigger(.afterFind, API.className(m)) { return false }
        return true
    }

    /// Runs the request on this I/O thread as the idle worker `seat` (its Lua VM), with the call
    /// attempted under a short budget. nil: the call yielded (budget spent, or a `db.*`, `http` or
    /// `log` call) and is suspended on that worker's VM; the worker then runs `handle`, which
    /// goes through the same steps and resumes the call where it stopped. Nothing the attempt
    /// did before that is visible: its quota unit is given back, and nothing is logged or counted.
    public func attempt(_ request: HTTPRequest, seat: Int?) -> HTTPResponse? {
        let name = (request.note as? RoutedNote)?.match?.value.name ?? ""
        let budget = API.readEndpoints.contains(name) ? API.readAttemptBudgetNanos : 0
        // A write that finds the writer held joins the next batch rather than wait for it.
        return InlineAttempt.running(readBudgetNanos: budget, writerWait: !batches(request)) {
            // A create or a read (no seat): nothing to resume; a worker runs it again from the start.
            guard let seat else { return respond(request, attempt: true) }
            return WorkerSeat.borrowing(seat) {
                services.cloud.attempting {
                    let r = respond(request, attempt: true)
                    if r != nil { services.cloud.discardPending() }
                    return r
                }
            }
        }
    }

    /// Creates and REST reads need no worker's VM (see `createsInline`, `readsInline`).
    public func attemptNeedsSeat(_ request: HTTPRequest) -> Bool {
        guard let note = request.note as? RoutedNote, let m = note.match else { return true }
        return m.value.name != "classes.create" && !API.readEndpoints.contains(m.value.name)
    }

    func respond(_ request: HTTPRequest, attempt: Bool) -> HTTPResponse? {
        var http = request
        if !(http.note is RoutedNote) { SDKRequest.normalize(&http) }
        var response: HTTPResponse
        if http.method == "OPTIONS" && cors.applies(http.path) {
            response = cors.preflight(http)
        } else {
            guard let r = answer(http, attempt: attempt) else { return nil }
            response = r
            // A Lua route that set its own CORS headers keeps them.
            let corsHeaders = cors.headers(http)
            if !corsHeaders.isEmpty, response.header("Access-Control-Allow-Origin") == nil {
                response.headers.append(contentsOf: corsHeaders)
            }
        }
        if API.carriesData(http), response.header("Cache-Control") == nil {
            response.headers.append(("Cache-Control", "no-store"))
        }
        return response
    }

    /// Answers from the API (not file downloads, health or metrics) carry user data: HTTP caches
    /// must not keep them (some, such as Foundation's URLCache on Linux, key GETs without their
    /// query string and would replay one query's answer for another).
    static func carriesData(_ http: HTTPRequest) -> Bool {
        let p = http.path
        if p.hasPrefix("/parse/files/") { return http.method != "GET" && http.method != "HEAD" }
        if p == "/parse/health" { return false }
        return p.hasPrefix("/parse/") || p.hasPrefix("/admin/") || p.hasPrefix("/oauth/")
    }

    func answer(_ http: HTTPRequest) -> HTTPResponse { answer(http, attempt: false)! }

    /// nil only for an attempt whose call continues on the worker (see `attempt`).
    func answer(_ http: HTTPRequest, attempt: Bool) -> HTTPResponse? {
        let started = monotonicNanos()
        let routed = http.note as? RoutedNote
        guard let match = routed != nil ? routed?.match : route(http.method, http.path) else {
            let allowed = parseRoutes.allowedMethods(path: http.path)
            let response: HTTPResponse = allowed.isEmpty
                ? .parseError(status: 404, code: .objectNotFound,
                              message: "no such endpoint: \(http.method) \(http.path)")
                : .parseError(status: 405, code: .commandUnavailable,
                              message: "method \(http.method) not allowed on \(http.path)",
                              headers: [("Allow", allowed.joined(separator: ", "))])
            Log.request(method: http.method, path: http.path, status: response.status,
                        micros: Int((monotonicNanos() &- started) / 1000),
                        account: Account.caller(userId: nil, ip: http.remoteAddress).key, requestId: http.requestId)
            return response
        }
        let endpoint = match.value
        let req = APIRequest(http: http, params: match.params, pattern: match.pattern)
        var response: HTTPResponse
        var decision: Decision?
        var refused = false
        var charged = endpoint.charged
        do throws(ParseError) {
            try authenticate(req, endpoint.access)
            if charged {
                let d = services.quota.check(account: account(req), function: functionLimit(req, endpoint),
                                             isMaster: req.isMaster)
                decision = d
                if let e = d.error {
                    refused = true
                    throw e
                }
            }
            var requestId: String?
            if http.method != "GET", let rid = http.header("x-parse-request-id"), !rid.isEmpty { requestId = rid }
            func duplicate() -> ParseError {
                charged = false
                if let d = decision { services.quota.refund(d) }
                return ParseError(.duplicateRequest, "Duplicate request")
            }
            if let rid = requestId, API.atomicRetryEndpoints.contains(endpoint.name) {
                // The id and the write commit together: a request that fails (or dies with the
                // process) leaves no id behind, so its retry is applied; one that was applied is
                // never applied twice.
                response = try services.store.transaction { () throws(ParseError) -> HTTPResponse in
                    guard try services.store.recordRequestId(rid) else { throw duplicate() }
                    return try endpoint.body(req)
                }
            } else {
                if let rid = requestId, try !services.store.recordRequestId(rid) { throw duplicate() }
                response = try endpoint.body(req)
            }
        } catch let e {
            if attempt && (LuaVM.isContinuesOnWorker(e) || InlineAttempt.isContinuesOnWorker(e) || InlineAttempt.expired) {
                if let d = decision, charged { services.quota.refund(d) }
                return nil
            }
            if e.code.rawValue == 0 {
                response = .json(e.httpStatus, Array(#"{"error":"unauthorized"}"#.utf8))
            } else {
                response = .error(e)
            }
            if e.code == .internalError {
                Log.error("\(http.method) \(http.path) failed: \(e.underlying ?? e.message)", requestId: http.requestId)
            }
        }
        if attempt && InlineAttempt.expired {
            // A read cut short by its budget, whose error (if any) some step turned into an
            // answer: that answer may be wrong. A worker reads again; nothing was written.
            if let d = decision, charged { services.quota.refund(d) }
            return nil
        }
        if charged && decision == nil {
            // Authentication failed before the quota check. The request still costs its unit (it
            // is recorded below), so count it toward the month as well, never refusing it: else
            // the month's count rebuilt from the usage rows at the next start would differ from
            // the one kept in memory.
            _ = services.quota.check(account: account(req), function: nil, isMaster: true)
        }
        // A refusal's error already carries the decision's headers (Retry-After included).
        if let d = decision, !refused { response.headers.append(contentsOf: d.headers.filter { $0.0 != "Retry-After" }) }
        response.headers.append(contentsOf: req.extraHeaders)
        let wallNanos = monotonicNanos() &- started
        var usage: RequestUsage?
        if charged {
            let u = RequestUsage(
                account: account(req), target: req.target ?? .api(endpoint.name), refused: refused,
                dbReads: req.meter.dbReads, dbWrites: req.meter.dbWrites,
                luaCpuMicros: Int64(req.meter.luaCPUNanos / 1000), wallMicros: Int64(wallNanos / 1000),
                bytesIn: Int64(http.body.count), bytesOut: Int64(response.body.count))
            services.quota.record(u)
            usage = u
        }
        recordCall(req, response, usage: usage, wallNanos: wallNanos)
        services.metrics.observe(route: endpoint.name, status: response.status, seconds: Double(wallNanos) / 1e9,
                                 usage: usage)
        Log.request(method: http.method, path: http.path, status: response.status, micros: Int(wallNanos / 1000),
                    account: account(req).key, requestId: http.requestId)
        return response
    }

    /// Keeps a Cloud Code call in the recent-calls ring; a failed one is also logged with its
    /// request id, so the dashboard's log view shows the error (with its file:line) in context.
    func recordCall(_ req: APIRequest, _ response: HTTPResponse, usage: RequestUsage?, wallNanos: UInt64) {
        let target = (req.target ?? .api("")).key
        guard CallRing.isCloudCall(target) else { return }
        var code: Int?
        var message: String?
        if response.status >= 400, let body = try? JSON.parse(response.body) {
            code = body["code"]?.intValue.map { Int($0) }
            message = body["error"]?.stringValue
        }
        services.calls.append(CallRecord(
            time: services.clock.nowMillis(), requestId: req.requestId, target: target, caller: account(req).key,
            status: response.status, wallMicros: Int64(wallNanos / 1000), luaCpuMicros: Int64(req.meter.luaCPUNanos / 1000),
            dbReads: req.meter.dbReads, dbWrites: req.meter.dbWrites, errorCode: code, error: message))
        if code == ParseErrorCode.scriptFailed.rawValue, let message {
            let name = String(target.split(separator: ":", maxSplits: 1).last ?? Substring(target))
            Log.emit(.error, "\(target) failed: \(message)", requestId: req.requestId, fields: [("function", name)])
        }
    }

    func account(_ req: APIRequest) -> Account {
        Account.caller(userId: req.userId, ip: req.http.remoteAddress)
    }

    func functionLimit(_ req: APIRequest, _ endpoint: Endpoint) -> FunctionLimit? {
        guard endpoint.name == "functions.call" else { return nil }
        let name = req.param("name")
        guard let perMinute = services.cloud.rateLimitPerMinute(function: name), perMinute > 0 else { return nil }
        return .function(name, perMinute: Int64(perMinute))
    }

    // MARK: keys and sessions

    /// Checks the application id / REST key / master key and resolves the session:
    /// wrong app id or REST key → 403 `{"error":"unauthorized"}`; master-only
    /// without the master key → 403/119; an invalid session token → 209.
    func authenticate(_ req: APIRequest, _ access: Access) throws(ParseError) {
        let http = req.http
        let config = services.config
        let masterGiven = http.header("x-parse-master-key")
        let isMaster = masterGiven.map { ConstantTime.equals($0, services.masterKey) } ?? false
        if access == .masterOnly {
            // Admin routes: the master key alone; anything else is 403 with 119.
            guard isMaster else { throw ParseError(.operationForbidden, "unauthorized: master key is required") }
            req.identity = .master
            return
        }
        if access != .open {
            guard let appId = http.header("x-parse-application-id"), ConstantTime.equals(appId, config.appId) else {
                throw API.unauthorized
            }
            if let rest = config.restKey, !isMaster {
                // The JavaScript SDK sends its key as `_JavaScriptKey` (read as this header).
                let given = http.header("x-parse-rest-api-key") ?? http.header("x-parse-javascript-key")
                guard let given, ConstantTime.equals(given, rest) else {
                    throw API.unauthorized
                }
            }
            if masterGiven != nil && !isMaster { throw API.unauthorized }
        }
        if access == .master && !isMaster {
            throw ParseError(.operationForbidden, "unauthorized: master key is required")
        }
        if isMaster {
            req.identity = .master
            return
        }
        if let token = sessionToken(http) {
            guard let session = try services.auth.resolveSession(token) else {
                throw ParseError(.invalidSessionToken, "Invalid session token")
            }
            req.identity = try services.objects.store.identity(forUser: session.userId)
            req.user = session.user
            req.sessionToken = token
        }
    }

    func sessionToken(_ http: HTTPRequest) -> String? {
        if let t = http.header("x-parse-session-token"), !t.isEmpty { return t }
        if let auth = http.header("authorization") {
            let lower = auth.lowercased()
            if lower.hasPrefix("bearer ") {
                let t = String(auth.dropFirst(7)).trimmingWhitespace()
                return t.isEmpty ? nil : t
            }
        }
        return nil
    }

    /// Object writes whose `X-Parse-Request-Id` is recorded in the write's own transaction.
    /// (Functions, users, files and jobs keep recording it first: running them inside the
    /// writer's transaction would hold the single writer for a whole Lua call or a hash.)
    static let atomicRetryEndpoints: Set<String> = ["classes.create", "classes.update", "classes.delete", "batch"]

    /// Parse's exact answer for a bad application id or REST key: 403 without a code.
    /// Marked by code 0, which `handle` renders without a code.
    static let unauthorized = ParseError(ParseErrorCode(0), "unauthorized", status: 403)
}

/// The route `API.dispatch` matched, carried to `handle` in `HTTPRequest.note`.
/// A nil match: the request was normalized but no route matched (or it is a preflight).
final class RoutedNote: Sendable {
    let match: RouteMatch<Endpoint>?
    /// A find or get that only reads local data (`readsInline`), decided at dispatch.
    let localRead: Bool
    /// A write that joins a batch (`writesInBatch`), decided at dispatch.
    let batched: Bool
    /// A batched create prepared at dispatch (`preparedCreate`).
    let prepared: PreparedCreate?
    init(_ match: RouteMatch<Endpoint>?, localRead: Bool = false, batched: Bool = false,
         prepared: PreparedCreate? = nil) {
        self.match = match
        self.localRead = localRead
        self.batched = batched
        self.prepared = prepared
    }
}

/// A batched create's body, validated at dispatch, with its answer's `Location` (its objectId is
/// drawn there): both made on the I/O thread, off the batch that holds the writer.
struct PreparedCreate: Sendable {
    let insert: PreparedInsert
    let location: String
}

extension String {
    /// Without leading and trailing spaces, tabs and line breaks (Foundation-free).
    public func trimmingWhitespace() -> String {
        let u = Array(utf8)
        var a = 0, b = u.count
        while a < b, u[a] == 32 || u[a] == 10 || u[a] == 13 || u[a] == 9 { a += 1 }
        while b > a, u[b - 1] == 32 || u[b - 1] == 10 || u[b - 1] == 13 || u[b - 1] == 9 { b -= 1 }
        return String(decoding: u[a..<b], as: UTF8.self)
    }
}
