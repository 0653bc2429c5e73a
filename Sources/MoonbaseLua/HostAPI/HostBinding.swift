import CLuaBridge
import MoonbaseCore
import MoonbaseJSON

#if canImport(Glibc)
import Glibc
#endif

/// What a host function id stands for. The Lua surface of each binding:
/// - `.host(ns, name)`: `db.*`, `files.delete`, `auth.*`, `http.request`, `config.get`, forwarded
///   to `CloudHostAPI` (an `http.*` call that ran into the call's wall-time limit ends the call).
/// - `.log(level)`: `log.debug/info/warn/error(msg, ...)` → `Log` with the request id and function.
/// - `.print(level)`: the global `print(...)` → `Log` at info, arguments joined by tabs as in Lua.
/// - `.timeNow`: `time.now()` → milliseconds since the epoch (integer).
/// - `.randomId`: `crypto.randomId([n])` → n (default 10, at most 256) alphanumeric characters.
/// - `.cloud(decl)`: `cloud.define/job/route/before*/after*/index/textIndex/classPermissions`
///   (load time only).
/// - `.jobProgress` / `.jobMessage`: `req.progress(fraction, text)` / `req.message(text)` of jobs.
/// - `.crypto(op)`: `crypto.sha256/hmacSha256/sign`, `crypto.base64.*`, `crypto.base64url.*` on
///   the raw bytes of their arguments (see `CryptoOp`).
enum HostBinding {
    case host(String, String)
    case log(LogLevel)
    case print(LogLevel)
    case timeNow
    case randomId
    case cloud(CloudDeclaration)
    case jobProgress
    case jobMessage
    case crypto(CryptoOp)

    /// Runs during an attempt on an I/O thread: neither blocks nor acts outside the call.
    var inlineSafe: Bool {
        switch self {
        case .timeNow, .randomId, .crypto, .cloud: return true
        case .host, .log, .print, .jobProgress, .jobMessage: return false
        }
    }

    var luaName: (String, String)? {
        switch self {
        case .host(let ns, let name): return (ns, name)
        case .log(let l): return ("log", l.name)
        case .print: return ("", "print")  // an empty namespace registers a global
        case .timeNow: return ("time", "now")
        case .randomId: return ("crypto", "randomId")
        case .cloud(let d): return ("cloud", d.rawValue)
        case .jobProgress, .jobMessage: return nil
        case .crypto(let op): return op.luaName
        }
    }
}

/// A failure of a host function: an error the script may catch, or a tripped limit it may not.
enum HostFailure: Error {
    case error(ParseError)
    case kill(Int32)
}

extension LuaVM {
    /// Called by the C trampoline. Converts the arguments, runs the binding and writes the answer
    /// into `out`; never touches the Lua state (the strict allocator proves it).
    func dispatch(_ fnid: Int, _ args: UnsafeMutablePointer<lb_value>, _ n: Int, _ out: OpaquePointer) -> Int32 {
        guard fnid >= 0 && fnid < bindings.count else {
            return fail(out, ParseError(.scriptFailed, "unknown host function"))
        }
        if case .crypto(let op) = bindings[fnid] { return dispatchCrypto(op, args, n, out) }
        var values: [LuaValue] = []
        values.reserveCapacity(n)
        for i in 0..<n {
            let v = args[i]
            switch Int(v.type) {
            case Int(LB_BOOL): values.append(.value(.bool(v.boolean != 0)))
            case Int(LB_INT): values.append(.value(.int(v.integer)))
            case Int(LB_NUM): values.append(.value(.double(v.number)))
            case Int(LB_STR): values.append(.value(.string(Self.string(v.str, v.len))))
            case Int(LB_JSON):
                let buf = UnsafeBufferPointer(start: UnsafeRawPointer(v.str!).assumingMemoryBound(to: UInt8.self), count: v.len)
                do throws(ParseError) {
                    values.append(.value(try JSON.parse(buf)))
                } catch {
                    return fail(out, error)
                }
            case Int(LB_FLAT): values.append(.value(.object(Self.flatObject(v))))
            case Int(LB_FUNC): values.append(.function(LuaFunctionRef(ref: v.ref)))
            case Int(LB_OTHER):
                return fail(out, ParseError(.scriptFailed, "unsupported argument of type \(Self.string(v.str, v.len))"))
            default: values.append(.value(.null))
            }
        }
        var keep: [Int32] = []
        let result: HostAnswer
        do throws(HostFailure) {
            if case .host(let ns, let name) = bindings[fnid] {
                result = try performHost(ns, name, values)
            } else {
                result = .value(try perform(bindings[fnid], values, &keep))
            }
        } catch {
            switch error {
            case .error(let e): return fail(out, e)
            case .kill(let reason): return lb_out_kill(out, reason)
            }
        }
        if !keep.isEmpty {
            for i in 0..<n where args[i].type == Int32(LB_FUNC) && keep.contains(args[i].ref) { args[i].keep = 1 }
        }
        switch result {
        case .value(let v): write(v, out)
        case .json(let bytes, let className):
            bytes.withUnsafeBufferPointer { b in
                b.withMemoryRebound(to: CChar.self) { text in
                    guard var tag = className else { return lb_out_json(out, text.baseAddress, text.count) }
                    tag.withUTF8 { t in
                        t.withMemoryRebound(to: CChar.self) { lb_out_json_tagged(out, text.baseAddress, text.count, $0.baseAddress, $0.count) }
                    }
                }
            }
        }
        return 0
    }

    /// The object an `LB_FLAT` tape stands for (its format is in luabridge.h). C wrote it whole
    /// for this call, so it is read as written.
    static func flatObject(_ v: lb_value) -> JSONObject {
        guard let base = v.str, v.integer > 0 else { return JSONObject() }
        let tape = UnsafeRawBufferPointer(start: base, count: v.len)
        var entries: [JSONObject.Entry] = []
        entries.reserveCapacity(Int(v.integer))
        var p = 0
        func text(_ n: Int) -> String {
            defer { p += n }
            return String(decoding: UnsafeRawBufferPointer(rebasing: tape[p..<p + n]), as: UTF8.self)
        }
        func eight() -> UInt64 {
            defer { p += 8 }
            return tape.loadUnaligned(fromByteOffset: p, as: UInt64.self)
        }
        while p < tape.count {
            let keyLength = Int(tape[p])
            p += 1
            let key = text(keyLength)
            let tag = tape[p]
            p += 1
            let value: JSONValue
            switch tag {
            case UInt8(ascii: "S"):
                let n = Int(tape.loadUnaligned(fromByteOffset: p, as: UInt32.self))
                p += 4
                value = .string(text(n))
            case UInt8(ascii: "I"): value = .int(Int64(bitPattern: eight()))
            case UInt8(ascii: "N"): value = .double(Double(bitPattern: eight()))
            case UInt8(ascii: "T"): value = .bool(true)
            case UInt8(ascii: "F"): value = .bool(false)
            default: value = .null   // 'Z'
            }
            entries.append(JSONObject.Entry(key, value))
        }
        return JSONObject(entries)
    }

    static func string(_ p: UnsafePointer<CChar>?, _ n: Int) -> String {
        guard let p else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: p, count: n), as: UTF8.self)
    }

    func fail(_ out: OpaquePointer, _ e: ParseError) -> Int32 {
        var m = e.message
        return m.withUTF8 { b in
            b.withMemoryRebound(to: CChar.self) { lb_out_error(out, Int32(e.code.rawValue), $0.baseAddress, $0.count) }
        }
    }

    func write(_ v: JSONValue, _ out: OpaquePointer) {
        switch v {
        case .null: lb_out_nil(out)
        case .bool(let b): lb_out_bool(out, b ? 1 : 0)
        case .int(let i): lb_out_int(out, i)
        case .double(let d): lb_out_num(out, d)
        case .string(var s):
            s.withUTF8 { b in b.withMemoryRebound(to: CChar.self) { lb_out_str(out, $0.baseAddress, $0.count) } }
        case .array, .object:
            let bytes = JSON.encode(v)
            bytes.withUnsafeBufferPointer { b in
                b.withMemoryRebound(to: CChar.self) { lb_out_json(out, $0.baseAddress, $0.count) }
            }
        }
    }

    /// The `file:line` of the Lua code calling the current host function.
    func callerLocation() -> LuaLocation? {
        var buf = [CChar](repeating: 0, count: 160)
        lb_caller_where(handle, &buf, buf.count)
        let s = String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return LuaLocation(s)
    }

    /// A `.host` binding: `db.*` counted against the call's budget, then `CloudHostAPI.answer`.
    func performHost(_ ns: String, _ name: String, _ args: [LuaValue]) throws(HostFailure) -> HostAnswer {
        guard let ctx = contexts.last, loadingFile == nil else {
            throw .error(ParseError(.scriptFailed, "\(ns).\(name) is not available while loading"))
        }
        if ns == "db" {
            let budget = ctx.limits.maxDbOps
            if budget > 0 && ctx.counters.dbOps >= budget { throw .kill(Int32(LB_KILL_DBOPS)) }
            ctx.counters.dbOps += 1
        }
        guard let host else { throw .error(ParseError(.scriptFailed, "\(ns).\(name) is not available")) }
        let v: HostAnswer
        do throws(ParseError) {
            v = try host.answer(ns, name, args, ctx)
        } catch {
            // Outbound I/O that ran into the call's wall-time limit ends the call (not
            // catchable), whatever the transport reported.
            if ns == "http" && lb_call_remaining_ms(handle) == 0 { throw .kill(Int32(LB_KILL_TIMEOUT)) }
            throw .error(error)
        }
        if ns == "http" && lb_call_remaining_ms(handle) == 0 { throw .kill(Int32(LB_KILL_TIMEOUT)) }
        return v
    }

    /// Every binding but `.host` (answered by `performHost`) and `.crypto` (by `dispatchCrypto`).
    func perform(_ b: HostBinding, _ args: [LuaValue], _ keep: inout [Int32]) throws(HostFailure) -> JSONValue {
        switch b {
        case .host:
            return .null   // answered by performHost
        case .log(let level):
            return luaLog(level, args, separator: " ")
        case .print(let level):
            return luaLog(level, args, separator: "\t")
        case .timeNow:
            return .int(clock.nowMillis())
        case .randomId:
            var n = 10
            if let v = args.first?.json, !v.isNull {
                guard let i = v.intValue, i >= 1, i <= 256 else {
                    throw .error(ParseError(.scriptFailed, "crypto.randomId: length must be an integer from 1 to 256"))
                }
                n = Int(i)
            }
            return .string(randomId(n))
        case .cloud(let decl):
            do throws(ParseError) {
                return try declare(decl, args, &keep)
            } catch {
                throw .error(error)
            }
        case .jobProgress:
            guard let job = contexts.last?.job else { return .null }
            var fraction: Double?
            var text: String?
            for a in args {
                if let d = a.json?.doubleValue { fraction = min(max(d, 0), 1) }
                if let s = a.stringValue { text = s }
            }
            job.progress(fraction, text)
            return .null
        case .crypto:
            return .null   // dispatched before the arguments are converted
        case .jobMessage:
            guard let job = contexts.last?.job else { return .null }
            guard let s = args.first?.stringValue else {
                throw .error(ParseError(.scriptFailed, "req.message: text must be a string"))
            }
            job.message(s)
            return .null
        }
    }
}
