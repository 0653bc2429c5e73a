import MoonbaseCore
import MoonbaseJSON

extension LuaVM {
    /// Runs `cloud.define(name, …)` with `req.params`, after its validators.
    /// - Returns: the function's return value (`{"result": …}` for the API).
    /// - Throws: 141 `Invalid function: "NAME"`; 142 from validators; the script's error code.
    public func runFunction(_ name: String, params: JSONObject, request: CloudRequest,
                            limits: LuaLimits = .functionDefaults) throws(ParseError) -> JSONValue {
        let (ref, args, ctx) = try functionCall(name, params: params, request: request, limits: limits)
        return try invoke(ref: ref, args: args, mode: .returnValue, context: ctx)
    }

    /// The same, answered with the return value as JSON text (`invokeText`): what
    /// `POST /parse/functions/NAME` sends back inside `{"result": …}`.
    public func runFunctionText(_ name: String, params: JSONObject, request: CloudRequest,
                                limits: LuaLimits = .functionDefaults) throws(ParseError) -> [UInt8] {
        let (ref, args, ctx) = try functionCall(name, params: params, request: request, limits: limits)
        return try invokeText(ref: ref, args: args, context: ctx)
    }

    /// The handler, its `req` as JSON text and the call's context, after the validators.
    private func functionCall(_ name: String, params: JSONObject, request: CloudRequest,
                              limits: LuaLimits) throws(ParseError) -> (Int32, LuaArgs, LuaCallContext) {
        guard let info = registry.functions[name], let ref = handlerRefs[.function(name)] else {
            throw ParseError(.scriptFailed, "Invalid function: \"\(name)\"")
        }
        let p = try CloudValidation.validate(info.options, params: params, request: request)
        let ctx = makeContext(identity: request.identity, user: request.user, requestId: request.requestId,
                              name: name, limits: limits.applying(info.options))
        return (ref, request.arguments([("params", .object(p))]), ctx)
    }

    /// Whether a trigger is registered (the store skips the call entirely otherwise).
    public func hasTrigger(_ kind: CloudTriggerKind, _ className: String) -> Bool {
        handlerRefs[.trigger(CloudRegistry.triggerKey(kind, className))] != nil
    }

    /// Runs a trigger.
    /// - `beforeSave`: returns `req.object` after the trigger (it may mutate it).
    /// - `afterFind`: `req.objects`; returns the list the trigger returned, or `req.objects`.
    /// - others: returns nil.
    /// Returns nil without running anything when no trigger is registered.
    public func runTrigger(_ kind: CloudTriggerKind, className: String, object: JSONValue? = nil,
                           original: JSONValue? = nil, objects: [JSONValue]? = nil, request: CloudRequest,
                           limits: LuaLimits = .functionDefaults) throws(ParseError) -> JSONValue? {
        let key = CloudRegistry.triggerKey(kind, className)
        guard let ref = handlerRefs[.trigger(key)] else { return nil }
        var extra: [(String, JSONValue)] = [("className", .string(className)), ("triggerName", .string(kind.rawValue))]
        if let object { extra.append(("object", object)) }
        if let original { extra.append(("original", original)) }
        if let objects { extra.append(("objects", .array(objects))) }
        let ctx = makeContext(identity: request.identity, user: request.user, requestId: request.requestId,
                              name: key, limits: limits)
        let mode: LuaResultMode
        switch kind {
        case .beforeSave: mode = .field("object")
        case .afterFind: mode = .returnOrField("objects")
        default: mode = .returnValue
        }
        let v = try invoke(ref: ref, args: request.arguments(extra), mode: mode, context: ctx)
        switch kind {
        case .beforeSave:
            guard v.objectValue != nil else {
                throw ParseError(.scriptFailed, "beforeSave \(className): req.object must stay an object")
            }
            return v
        case .afterFind:
            if case .object(let o) = v, o.isEmpty { return .array([]) }
            guard v.arrayValue != nil else {
                throw ParseError(.scriptFailed, "afterFind \(className): must return a list of objects")
            }
            return v
        default:
            return nil
        }
    }

    /// Runs the `cloud.sendEmail` hook with `message` (`to`, `subject`, `text`, `link`, `kind`)
    /// as master. - Returns: false when no hook is declared.
    public func runEmailHook(_ message: JSONObject, limits: LuaLimits = .functionDefaults) throws(ParseError) -> Bool {
        guard let ref = handlerRefs[.emailHook] else { return false }
        let ctx = makeContext(identity: .master, user: nil, requestId: nil, name: "sendEmail", limits: limits)
        _ = try invoke(ref: ref, args: [.object(message)], mode: .returnValue, context: ctx)
        return true
    }

    /// Runs the route matching `method path`, or returns nil when none matches.
    /// - Throws: the script's error (the API answers 500/141 for a bare error, 400/code for
    ///   `cloud.error`).
    public func runRoute(_ r: CloudRouteRequest, limits: LuaLimits = .functionDefaults) throws(ParseError) -> CloudRouteResponse? {
        var found: (CloudRouteInfo, [(String, String)])?
        if let m = r.matched, let info = registry.routes.first(where: { $0.method == m.method && $0.path == m.pattern }) {
            found = (info, m.params)
        } else if let (info, params) = registry.matchRoute(method: r.method, path: r.path) {
            found = (info, params.map { ($0.key, $0.value) })
        }
        guard let (route, params) = found, let ref = handlerRefs[.route(route.method, route.path)] else { return nil }
        // `req.json`: the body's own text when it is JSON (checked by parsing it here; the
        // bridge decodes the text itself, so it is not written again from the parsed value).
        let jsonBody = !r.body.isEmpty && (try? JSON.parse(r.body)) != nil
        // (The members' values taken out first: a closure capturing `r` while `r.request` writes
        // the arguments made Swift copy the whole request twice.)
        let (method, query, body) = (r.method.uppercased(), r.query, r.body)
        let args = r.request.arguments { a in
            a.key("method")
            a.string(method)
            a.key("path")
            a.strings(params)
            a.key("query")
            a.strings(query)
            if jsonBody {
                a.key("json")
                a.json(text: body)
            }
            a.key("body")
            a.string(bytes: body)
        }
        let ctx = makeContext(identity: r.request.identity, user: r.request.user, requestId: r.request.requestId,
                              name: "\(route.method) \(route.path)", limits: limits.applying(route.options))
        return try invokeRoute(ref: ref, args: args, context: ctx)
    }

    /// What a route's return value answers, from the bridge's JSON text of it. `members`: which
    /// of `json`, `status`, `body`, `headers` the value (a table) has (`LB_MEMBER_*`), and `json`
    /// where the `json` member's value lies in `text`, both noted by the bridge while it wrote
    /// the text. The `json` value is sent as that text, never parsed: only the table's other
    /// members are (the text with that value left out), so a route answering a large list costs
    /// no more than its encoding. A value with none of the four members is the answer itself.
    static func routeResponse(text: [UInt8], members: UInt32, json: Range<Int>?) throws(ParseError) -> CloudRouteResponse {
        guard members != 0 else {
            if text == Array("null".utf8) { return CloudRouteResponse(status: 204, headers: [], body: []) }
            if text.first == UInt8(ascii: "\""), case .string(let s) = try JSON.parse(text) {
                return CloudRouteResponse(status: 200, headers: [("Content-Type", "text/plain; charset=utf-8")], body: Array(s.utf8))
            }
            return CloudRouteResponse(status: 200, headers: [("Content-Type", "application/json")], body: text)
        }
        var rest = text
        if let json { rest.replaceSubrange(json, with: "null".utf8) }
        guard case .object(let o) = try JSON.parse(rest) else {
            throw ParseError(.scriptFailed, "route: the answer must be a table")
        }
        var status = 200
        if let s = o["status"] {
            guard let i = s.intValue, i >= 100, i <= 599 else {
                throw ParseError(.scriptFailed, "route: status must be an integer from 100 to 599")
            }
            status = Int(i)
        }
        var headers: [(String, String)] = []
        if let h = o["headers"] {
            guard let ho = h.objectValue else { throw ParseError(.scriptFailed, "route: headers must be a table of strings") }
            for e in ho {
                let value: String
                switch e.value {
                case .string(let s): value = s
                case .int(let i): value = String(i)
                default: throw ParseError(.scriptFailed, "route: header \(e.key) must be a string")
                }
                guard !e.key.utf8.contains(where: { $0 < 33 || $0 == 58 }), !value.utf8.contains(where: { $0 == 13 || $0 == 10 }) else {
                    throw ParseError(.scriptFailed, "route: invalid header \(e.key)")
                }
                headers.append((e.key, value))
            }
        }
        func has(_ name: String) -> Bool { headers.contains { $0.0.lowercased() == name } }
        var body: [UInt8] = []
        if let json {
            body = Array(text[json])
            if !has("content-type") { headers.append(("Content-Type", "application/json")) }
        } else if let b = o["body"] {
            guard let s = b.stringValue else { throw ParseError(.scriptFailed, "route: body must be a string") }
            body = Array(s.utf8)
            if !has("content-type") { headers.append(("Content-Type", "text/plain; charset=utf-8")) }
        }
        return CloudRouteResponse(status: status, headers: headers, body: body)
    }

    /// Runs `cloud.job(name, fn)` with `req.params`, `req.progress(fraction, text)` and
    /// `req.message(text)` delivered to `callbacks`.
    /// - Returns: the final message: a returned string, or a returned table JSON-encoded; nil otherwise.
    /// - Throws: 141 `Invalid job: "NAME"`; the script's error.
    public func runJob(_ name: String, params: JSONObject, request: CloudRequest = CloudRequest(identity: .master),
                       limits: LuaLimits = .jobDefaults, callbacks: LuaJobCallbacks) throws(ParseError) -> String? {
        guard let info = registry.jobs[name], let ref = handlerRefs[.job(name)] else {
            throw ParseError(.scriptFailed, "Invalid job: \"\(name)\"")
        }
        let ctx = makeContext(identity: request.identity, user: request.user, requestId: request.requestId,
                              name: name, limits: limits.applying(info.options), job: callbacks)
        let v = try invoke(ref: ref, args: request.arguments([("params", .object(params))]),
                           extras: [("progress", .function(progressFn)), ("message", .function(messageFn))],
                           mode: .returnValue, context: ctx)
        switch v {
        case .null: return nil
        case .string(let s): return s
        default: return v.jsonString
        }
    }
}
