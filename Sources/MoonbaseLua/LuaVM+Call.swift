import CLuaBridge
import MoonbaseCore
import MoonbaseJSON

#if canImport(Glibc)
import Glibc
#endif

/// Result shapes of a call (C's LB_RESULT_*).
enum LuaResultMode {
    case returnValue
    case field(String)
    case returnOrField(String)
    case shared
}

extension LuaVM {
    /// Calls a function the host received (e.g. `db.transaction(fn)`'s `fn`) with JSON arguments.
    ///
    /// During a running call this is part of that call: same globals table, limits and budget.
    /// - Throws: `ParseError` with the Lua error's code (141 for a bare error or a tripped limit).
    public func call(_ fn: LuaFunctionRef, _ args: [JSONValue] = []) throws(ParseError) -> JSONValue {
        if let ctx = contexts.last {
            return try invoke(ref: fn.ref, args: args, mode: .shared, context: ctx)
        }
        let ctx = makeContext(identity: .anonymous, user: nil, requestId: nil, name: "function",
                              limits: .functionDefaults)
        return try invoke(ref: fn.ref, args: args, mode: .returnValue, context: ctx)
    }

    /// A context for a new call; nested calls share the outermost call's limits and counters.
    func makeContext(identity: Identity, user: JSONValue?, requestId: String?, name: String,
                     limits: LuaLimits, job: LuaJobCallbacks? = nil) -> LuaCallContext {
        if let outer = contexts.first {
            return LuaCallContext(identity: identity, user: user, requestId: requestId ?? outer.requestId,
                                  functionName: name, limits: outer.limits, counters: outer.counters,
                                  vm: self, job: job ?? outer.job)
        }
        return LuaCallContext(identity: identity, user: user, requestId: requestId, functionName: name,
                              limits: limits, counters: LuaCallCounters(), vm: self, job: job)
    }

    /// Runs `ref` with `args` under `context`. The core of every invocation.
    func invoke(ref: Int32, args: [JSONValue], extras: [(String, LuaExtra)] = [], mode: LuaResultMode,
                context: LuaCallContext) throws(ParseError) -> JSONValue {
        try invoke(ref: ref, args: LuaArgs(args), extras: extras, mode: mode, context: context)
    }

    /// The same, with the argument list already written for the bridge: handlers get their
    /// `req` this way (`CloudRequest.arguments`).
    func invoke(ref: Int32, args: LuaArgs, extras: [(String, LuaExtra)] = [], mode: LuaResultMode,
                context: LuaCallContext) throws(ParseError) -> JSONValue {
        try run(ref: ref, args: args, extras: extras, mode: mode, context: context) { res throws(ParseError) in
            try decodeResult(&res, context: context)
        }
    }

    /// The same, answered with the JSON text the bridge wrote for the result instead of a value
    /// tree: a function's or route's HTTP answer carries that text as it is (the bridge's encoder
    /// refuses what JSON cannot hold, so it is valid JSON), which spares parsing it into a
    /// `JSONValue` and writing it again (about 5,000 of a Lua hello's 108,000 instructions).
    func invokeText(ref: Int32, args: LuaArgs, extras: [(String, LuaExtra)] = [],
                    context: LuaCallContext) throws(ParseError) -> [UInt8] {
        try run(ref: ref, args: args, extras: extras, mode: .returnValue, context: context) { res throws(ParseError) in
            try resultText(&res, context: context)
        }
    }

    /// A route's call, answered as the route's response (`routeResponse`), read from the
    /// bridge's text of the result and the members it noted while writing it (`lb_result.members`
    /// and the place of the `json` member's value).
    func invokeRoute(ref: Int32, args: LuaArgs, context: LuaCallContext) throws(ParseError) -> CloudRouteResponse {
        try run(ref: ref, args: args, extras: [], mode: .returnValue, context: context) { res throws(ParseError) in
            let text = try resultText(&res, context: context)
            let members = res.members
            let json = members & UInt32(LB_MEMBER_JSON) != 0
                ? res.json_member_off..<(res.json_member_off + res.json_member_len) : nil
            return try LuaVM.routeResponse(text: text, members: members, json: json)
        }
    }

    /// The core of every invocation; `finish` reads the bridge's result before it is freed.
    private func run<R>(ref: Int32, args: LuaArgs, extras: [(String, LuaExtra)], mode: LuaResultMode,
                        context: LuaCallContext,
                        finish: (inout lb_result) throws(ParseError) -> R) throws(ParseError) -> R {
        var attempt: Int64 = 0
        if contexts.isEmpty {
            attempt = attemptNanos
            attemptNanos = 0
            if let p = pendingRef {
                if lb_suspended(handle) == 0 {
                    pendingRef = nil   // the bridge dropped it (something else ran on this VM first)
                } else if p == ref, case .returnValue = mode {
                    // The worker finishing an attempt reaches the same handler: resume it.
                    return try resumePending(context, finish: finish)
                } else {
                    discardPending()
                }
            }
        }
        var cMode: Int32
        var field: String?
        switch mode {
        case .returnValue: cMode = Int32(LB_RESULT_RETURN)
        case .field(let f): cMode = Int32(LB_RESULT_FIELD); field = f
        case .returnOrField(let f): cMode = Int32(LB_RESULT_RETURN_OR_FIELD); field = f
        case .shared: cMode = Int32(LB_RESULT_RETURN) | Int32(LB_RESULT_SHARED_GLOBALS)
        }
        // A call with a longer limit than the worker pool's default must not be taken for stuck.
        JobWatch.noteLimit(millis: context.limits.timeoutMs)
        var limits = context.limits.bridge
        if attempt > 0, case .returnValue = mode {
            if notAttempted.contains(ref) { throw LuaVM.continuesOnWorker }
            limits.attempt_ns = attempt
        }
        var cExtras: [lb_extra] = []
        var owned: [UnsafeMutablePointer<CChar>] = []
        defer { for p in owned { free(p) } }
        for (key, e) in extras {
            let k = strdup(key)!
            owned.append(k)
            switch e {
            case .bytes(let bytes):
                let p = UnsafeMutablePointer<CChar>.allocate(capacity: max(bytes.count, 1))
                bytes.withUnsafeBufferPointer { b in
                    if let base = b.baseAddress { memcpy(p, base, b.count) }
                }
                owned.append(p)
                cExtras.append(lb_extra(key: k, bytes: p, len: bytes.count, fnid: -1))
            case .function(let fnid):
                cExtras.append(lb_extra(key: k, bytes: nil, len: 0, fnid: fnid))
            }
        }
        contexts.append(context)
        defer { popContext(context) }
        var res = lb_result()
        defer { lb_result_free(&res) }
        let fieldC = field.map { strdup($0)! }
        defer { if let fieldC { free(fieldC) } }
        _ = args.withBytes { ap, n in
            cExtras.withUnsafeBufferPointer { ex in
                lb_call(handle, ref, ap, n, ex.baseAddress, Int32(ex.count), cMode, fieldC, limits, &res)
            }
        }
        if limits.attempt_ns > 0 && lb_attempt_stuck(handle) != 0 { notAttempted.insert(ref) }
        if res.status == Int32(LB_SUSPENDED) {
            pendingRef = ref
            throw LuaVM.continuesOnWorker
        }
        return try finish(&res)
    }

    /// Finishes the suspended call on this thread under `context` (built by the worker exactly
    /// as the attempt built its own).
    private func resumePending<R>(_ context: LuaCallContext,
                                  finish: (inout lb_result) throws(ParseError) -> R) throws(ParseError) -> R {
        pendingRef = nil
        JobWatch.noteLimit(millis: context.limits.timeoutMs)
        contexts.append(context)
        defer { popContext(context) }
        var res = lb_result()
        defer { lb_result_free(&res) }
        lb_resume_call(handle, &res)
        return try finish(&res)
    }

    /// Ends a call's context; the host hears when the outermost call on this thread ends.
    func popContext(_ context: LuaCallContext) {
        contexts.removeLast()
        if contexts.isEmpty { host?.callEnded(context) }
    }

    func decodeResult(_ res: inout lb_result, context: LuaCallContext) throws(ParseError) -> JSONValue {
        guard res.status == Int32(LB_OK) else { return try failure(&res, context: context) }
        guard let p = res.json else { return .null }
        let buf = UnsafeBufferPointer(start: UnsafeRawPointer(p).assumingMemoryBound(to: UInt8.self), count: res.json_len)
        return try JSON.parse(buf)
    }

    /// A successful result's JSON text ("null" when there is none); a failure's error.
    func resultText(_ res: inout lb_result, context: LuaCallContext) throws(ParseError) -> [UInt8] {
        guard res.status == Int32(LB_OK) else { return try failure(&res, context: context) }
        guard let p = res.json, res.json_len > 0 else { return Array("null".utf8) }
        return Array(UnsafeBufferPointer(start: UnsafeRawPointer(p).assumingMemoryBound(to: UInt8.self), count: res.json_len))
    }

    /// The error a failed call (`res.status` other than `LB_OK`) throws.
    private func failure<T>(_ res: inout lb_result, context: LuaCallContext) throws(ParseError) -> T {
        switch Int(res.status) {
        case Int(LB_KILLED):
            throw killError(reason: res.kill_reason, where: whereString(&res), context: context)
        default:
            let msg = res.message.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: res.message_len), as: UTF8.self) } ?? "error"
            let w = whereString(&res)
            throw ParseError(ParseErrorCode(Int(res.code)), msg, underlying: w.isEmpty ? nil : "at \(w)")
        }
    }

    func whereString(_ res: inout lb_result) -> String {
        withUnsafeBytes(of: &res.where) { raw in
            let bytes = raw.prefix { $0 != 0 }
            return String(decoding: bytes, as: UTF8.self)
        }
    }

    /// "timeout of 100 ms exceeded in function 'spin' (functions/a.lua:3)"
    func killError(reason: Int32, where w: String, context: LuaCallContext) -> ParseError {
        let outer = contexts.first ?? context
        let l = outer.limits
        let what: String
        switch Int(reason) {
        case Int(LB_KILL_TIMEOUT): what = "timeout of \(l.timeoutMs) ms exceeded"
        case Int(LB_KILL_INSTRUCTIONS): what = "instruction limit of \(l.maxInstructions) exceeded"
        case Int(LB_KILL_DBOPS): what = "database operation limit of \(l.maxDbOps) exceeded"
        case Int(LB_KILL_WRITER_HOLD): what = "writer hold limit of \(l.writerHoldMs) ms exceeded"
        case Int(LB_KILL_VM_MEMORY): what = "VM memory limit of \(l.maxVMMemoryBytes >> 20) MB (module state included) exceeded"
        case Int(LB_KILL_RESULT): what = "response size limit of \(l.maxResultBytes >> 20) MB exceeded"
        default: what = "memory limit of \(l.maxMemoryMB) MB exceeded"
        }
        var msg = "\(what) in function '\(outer.functionName)'"
        if !w.isEmpty { msg += " (\(w))" }
        return ParseError(.scriptFailed, msg)
    }
}

extension LuaVM {
    /// Runs `body` (which runs Lua on this VM) while the calling thread holds the database
    /// writer: Lua code running after the writer hold limit has passed is stopped with 141
    /// "writer hold limit of N ms exceeded", so the write rolls back and the writer is free.
    /// The limit is the outermost running call's, else `limits`'s (a trigger fired by a REST
    /// write). Nested spans keep the outermost span's start.
    public func holdingWriter<T>(_ limits: LuaLimits, _ body: () throws(ParseError) -> T) throws(ParseError) -> T {
        let ms = (contexts.first?.limits ?? limits).writerHoldMs
        lb_hold_begin(handle, ms)
        defer { lb_hold_end(handle) }
        return try body()
    }
}

/// An extra field set on a call's first argument.
enum LuaExtra {
    case bytes([UInt8])
    case function(Int64)
}
