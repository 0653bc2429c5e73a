import CLuaBridge
import MoonbaseCore
import MoonbaseJSON

extension LuaVM {
    /// Runs a file's top level once (the load pass): it registers handlers and
    /// declarations into `registry`. File-level locals become module state of this VM; globals
    /// assigned at top level belong to this file alone (calls read them and only shadow them;
    /// other files never see them: shared code goes in a `lib/` module and is `require`d).
    /// - Throws: `LuaLoadError` with file:line for syntax errors, runtime errors, bad or
    ///   duplicate declarations and tripped limits.
    public func load(file: String, source: String, limits: LuaLimits = .loadDefaults) throws(LuaLoadError) {
        try loadPass(file: file, limits: limits) { res in
            var src = source
            src.withUTF8 { b in
                b.withMemoryRebound(to: CChar.self) { _ = lb_load(handle, "@" + file, $0.baseAddress, $0.count, limits.bridge, &res) }
            }
        }
    }

    /// One load pass of `file` (its top level, or a module it requires): the load context is
    /// current while `run` fills the bridge's result; a failure becomes a `LuaLoadError`.
    private func loadPass(file: String, limits: LuaLimits, _ run: (inout lb_result) -> Void) throws(LuaLoadError) {
        let ctx = makeContext(identity: .anonymous, user: nil, requestId: nil, name: "load \(file)", limits: limits)
        loadingFile = file
        contexts.append(ctx)
        defer {
            contexts.removeLast()
            loadingFile = nil
        }
        var res = lb_result()
        defer { lb_result_free(&res) }
        run(&res)
        if res.status == Int32(LB_OK) { return }
        throw loadError(&res, file: file, context: ctx)
    }

    /// A failed load or require as file:line and message.
    func loadError(_ res: inout lb_result, file: String, context ctx: LuaCallContext) -> LuaLoadError {
        do throws(ParseError) {
            _ = try decodeResult(&res, context: ctx)
            return LuaLoadError(file: file, line: nil, message: "failed")
        } catch {
            var message = error.message
            var file = file
            var line: Int?
            if let u = error.underlying, u.hasPrefix("at "), let loc = LuaLocation(String(u.dropFirst(3))) {
                line = loc.line
                if loc.file.hasPrefix("lib/") { file = loc.file }
            }
            // Syntax errors and error("...") carry a "file:line: " prefix: move it into `line`
            // (a module's prefix names the module's file).
            if let m = LuaVM.splitLocation(message) {
                file = m.file
                line = m.line
                message = m.rest
            }
            return LuaLoadError(file: file, line: line, message: message)
        }
    }

    /// Splits "name.lua:12: text" (the prefix Lua puts on syntax and runtime errors).
    static func splitLocation(_ message: String) -> (file: String, line: Int, rest: String)? {
        guard let dot = message.firstRange(of: ".lua:") else { return nil }
        let file = String(message[..<dot.upperBound].dropLast())
        guard !file.contains(" ") else { return nil }
        let rest = message[dot.upperBound...]
        guard let colon = rest.firstIndex(of: ":"), let n = Int(rest[..<colon]) else { return nil }
        return (file, n, String(String(rest[rest.index(after: colon)...]).trimmingPrefix(" ")))
    }

    /// The module name of a file under `lib/` (`lib/geo.lua` → `lib.geo`), nil for other files.
    public static func moduleName(file: String) -> String? {
        guard file.hasPrefix("lib/"), file.hasSuffix(".lua") else { return nil }
        return String(file.dropLast(4)).replacing("/", with: ".")
    }

    /// Loads a generation's files: modules (`lib/…`) are handed to the VM for `require`, every
    /// other file runs its top level. With `checkModules`, every module is then required once, so
    /// a module no file uses yet still reports its errors (hot reload, `moonbase check`).
    /// - Returns: the failures, one per file.
    public func loadAll(_ sources: [(file: String, text: String)], limits: LuaLimits = .loadDefaults,
                        checkModules: Bool) -> [LuaLoadError] {
        var failures: [LuaLoadError] = []
        var modules: [(file: String, name: String)] = []
        for s in sources {
            guard let name = LuaVM.moduleName(file: s.file) else { continue }
            var text = s.text
            let ok = text.withUTF8 { b in
                b.withMemoryRebound(to: CChar.self) { lb_add_module(handle, name, $0.baseAddress, $0.count) == 0 }
            }
            if ok { modules.append((s.file, name)) } else {
                failures.append(LuaLoadError(file: s.file, line: nil, message: "not enough memory"))
            }
        }
        for s in sources where LuaVM.moduleName(file: s.file) == nil {
            do throws(LuaLoadError) {
                try load(file: s.file, source: s.text, limits: limits)
            } catch {
                failures.append(error)
            }
        }
        if checkModules {
            for m in modules where !failures.contains(where: { $0.file == m.file }) {
                do throws(LuaLoadError) {
                    try requireModule(m.name, file: m.file, limits: limits)
                } catch {
                    if !failures.contains(error) { failures.append(error) }
                }
            }
        }
        return failures
    }

    /// Runs `require(name)` outside any file (a module already loaded is not run again).
    public func requireModule(_ name: String, file: String, limits: LuaLimits = .loadDefaults) throws(LuaLoadError) {
        try loadPass(file: file, limits: limits) { res in _ = lb_require_module(handle, name, limits.bridge, &res) }
    }

    func declare(_ d: CloudDeclaration, _ args: [LuaValue], _ keep: inout [Int32]) throws(ParseError) -> JSONValue {
        let fname = "cloud.\(d.rawValue)"
        guard loadingFile != nil else {
            throw ParseError(.scriptFailed, "\(fname) can only be called when the file loads")
        }
        let loc = callerLocation()
        func bad(_ what: String) -> ParseError { ParseError(.scriptFailed, "\(fname): \(what)") }
        func str(_ i: Int, _ what: String) throws(ParseError) -> String {
            guard i < args.count, let s = args[i].stringValue, !s.isEmpty else { throw bad("\(what) must be a non-empty string") }
            return s
        }
        /// (options, function) from `[options,] fn` starting at `i`.
        func optionsAndFunction(_ i: Int) throws(ParseError) -> (CloudFunctionOptions, LuaFunctionRef) {
            if args.count == i + 1, let f = args[i].function { return (CloudFunctionOptions(), f) }
            guard args.count == i + 2, let f = args[i + 1].function else { throw bad("expected [options,] function") }
            guard let o = args[i].objectValue else {
                if args[i].json == .object([:]) || args[i].json?.arrayValue?.isEmpty == true { return (CloudFunctionOptions(), f) }
                throw bad("options must be a table")
            }
            return (try parseOptions(o, fname), f)
        }
        switch d {
        case .define, .job:
            let name = try str(0, "name")
            let (opts, f) = try optionsAndFunction(1)
            let key: CloudHandlerKey = d == .define ? .function(name) : .job(name)
            if let prev = (d == .define ? registry.functions[name] : registry.jobs[name]) {
                throw bad("'\(name)' is already defined" + (prev.location.map { " (first at \($0))" } ?? ""))
            }
            let info = CloudHandlerInfo(name: name, options: opts, location: loc)
            if d == .define { registry.functions[name] = info } else { registry.jobs[name] = info }
            handlerRefs[key] = f.ref
            keep.append(f.ref)
        case .route:
            let method = try str(0, "method").uppercased()
            guard ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "*"].contains(method) else {
                throw bad("unknown method '\(method)'")
            }
            let path = try str(1, "path")
            guard path.hasPrefix("/") else { throw bad("path must start with '/'") }
            let (opts, f) = try optionsAndFunction(2)
            if let prev = registry.routes.first(where: { $0.method == method && $0.path == path }) {
                throw bad("route \(method) \(path) is already defined" + (prev.location.map { " (first at \($0))" } ?? ""))
            }
            registry.routes.append(CloudRouteInfo(method: method, path: path, options: opts, location: loc))
            handlerRefs[.route(method, path)] = f.ref
            keep.append(f.ref)
        case .beforeConnect, .onLiveQueryEvent:
            guard args.count == 1, let f = args[0].function else { throw bad("expected (function)") }
            let key = CloudRegistry.triggerKey(CloudTriggerKind(rawValue: d.rawValue)!, "")
            if let prev = registry.triggers[key] {
                throw bad("\(d.rawValue) is already defined" + (prev.location.map { " (first at \($0))" } ?? ""))
            }
            registry.triggers[key] = CloudHandlerInfo(name: d.rawValue, options: CloudFunctionOptions(), location: loc)
            handlerRefs[.trigger(key)] = f.ref
            keep.append(f.ref)
        case .beforeSave, .afterSave, .beforeDelete, .afterDelete, .afterFind, .beforeSubscribe:
            let cls = try str(0, "className")
            guard args.count == 2, let f = args[1].function else { throw bad("expected (className, function)") }
            let kind = CloudTriggerKind(rawValue: d.rawValue)!
            let key = CloudRegistry.triggerKey(kind, cls)
            if let prev = registry.triggers[key] {
                throw bad("\(key) is already defined" + (prev.location.map { " (first at \($0))" } ?? ""))
            }
            registry.triggers[key] = CloudHandlerInfo(name: key, options: CloudFunctionOptions(), location: loc)
            handlerRefs[.trigger(key)] = f.ref
            keep.append(f.ref)
        case .index, .textIndex:
            let cls = try str(0, "className")
            guard args.count >= 2, let arr = args[1].json?.arrayValue, !arr.isEmpty else {
                throw bad("fields must be a non-empty list of field names")
            }
            var fields: [String] = []
            for v in arr {
                guard let s = v.stringValue, !s.isEmpty else { throw bad("fields must be a non-empty list of field names") }
                fields.append(s)
            }
            var unique = false
            if args.count >= 3, let o = args[2].json, !o.isNull {
                guard d == .index, let obj = o.objectValue else { throw bad("options must be a table") }
                for e in obj {
                    guard e.key == "unique", let b = e.value.boolValue else { throw bad("unknown option '\(e.key)'") }
                    unique = b
                }
            }
            let decl = CloudIndexDeclaration(className: cls, fields: fields, unique: unique, text: d == .textIndex, location: loc)
            if !registry.indexes.contains(where: { $0.className == cls && $0.fields == fields && $0.text == decl.text }) {
                registry.indexes.append(decl)
            } else if let prev = registry.indexes.first(where: { $0.className == cls && $0.fields == fields && $0.text == decl.text }),
                      prev.unique != unique {
                throw bad("index on \(cls)(\(fields.joined(separator: ","))) declared twice with different options")
            }
        case .sendEmail:
            guard args.count == 1, let f = args[0].function else { throw bad("expected a function") }
            if let prev = registry.emailHook {
                throw bad("the mail hook is already defined" + (prev.location.map { " (first at \($0))" } ?? ""))
            }
            registry.emailHook = CloudHandlerInfo(name: "sendEmail", options: CloudFunctionOptions(), location: loc)
            handlerRefs[.emailHook] = f.ref
            keep.append(f.ref)
        case .classPermissions:
            let cls = try str(0, "className")
            guard args.count == 2, let v = args[1].json, v.objectValue != nil else { throw bad("permissions must be a table") }
            if registry.classPermissions.contains(where: { $0.className == cls }) {
                throw bad("permissions of \(cls) are already declared")
            }
            registry.classPermissions.append(CloudClassPermissions(className: cls, permissions: v, location: loc))
        }
        return .null
    }

    func parseOptions(_ o: JSONObject, _ fname: String) throws(ParseError) -> CloudFunctionOptions {
        func bad(_ what: String) -> ParseError { ParseError(.scriptFailed, "\(fname): \(what)") }
        var r = CloudFunctionOptions()
        func bool(_ v: JSONValue, _ k: String) throws(ParseError) -> Bool {
            guard let b = v.boolValue else { throw bad("option '\(k)' must be a boolean") }
            return b
        }
        func positive(_ v: JSONValue, _ k: String) throws(ParseError) -> Int64 {
            guard let i = v.intValue, i >= 0 else { throw bad("option '\(k)' must be a non-negative integer") }
            return i
        }
        for e in o {
            switch e.key {
            case "requireUser": r.requireUser = try bool(e.value, e.key)
            case "requireMaster": r.requireMaster = try bool(e.value, e.key)
            case "validateMasterKey": r.validateMasterKey = try bool(e.value, e.key)
            case "timeoutMs": r.timeoutMs = try positive(e.value, e.key)
            case "maxMemoryMB": r.maxMemoryMB = try positive(e.value, e.key)
            case "maxDbOps": r.maxDbOps = try positive(e.value, e.key)
            case "maxInstructions": r.maxInstructions = try positive(e.value, e.key)
            case "writerHoldMs": r.writerHoldMs = try positive(e.value, e.key)
            case "rateLimit":
                guard let rl = e.value.objectValue, let n = rl["perMinute"]?.intValue, n > 0, rl.count == 1 else {
                    throw bad("rateLimit must be {perMinute = N}")
                }
                r.rateLimitPerMinute = Int(n)
            case "fields":
                guard let fs = e.value.objectValue else {
                    if e.value.arrayValue?.isEmpty == true { continue }
                    throw bad("fields must be a table")
                }
                for f in fs {
                    var rule = CloudFieldRule(name: f.key, type: nil, required: false, options: nil, defaultValue: nil)
                    guard let spec = f.value.objectValue else { throw bad("fields.\(f.key) must be a table") }
                    for s in spec {
                        switch s.key {
                        case "type":
                            guard let t = s.value.stringValue?.lowercased(),
                                  ["string", "number", "boolean", "object", "array", "date", "any"].contains(t) else {
                                throw bad("fields.\(f.key).type must be string, number, boolean, object, array or date")
                            }
                            rule.type = t == "any" ? nil : t
                        case "required": rule.required = try bool(s.value, "fields.\(f.key).required")
                        case "options":
                            guard let a = s.value.arrayValue else { throw bad("fields.\(f.key).options must be a list") }
                            rule.options = a
                        case "default": rule.defaultValue = s.value
                        default: throw bad("unknown option 'fields.\(f.key).\(s.key)'")
                        }
                    }
                    r.fields.append(rule)
                }
            default: throw bad("unknown option '\(e.key)'")
            }
        }
        return r
    }
}
