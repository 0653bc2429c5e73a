import MoonbaseCore
import MoonbaseJSON

extension LuaVM {
    /// `log.*(…)` (arguments joined by spaces) and `print(…)` (by tabs, as Lua's own): one line to
    /// the server log and its ring, with the request id, the function and the caller's file:line.
    func luaLog(_ level: LogLevel, _ args: [LuaValue], separator: String) -> JSONValue {
        let text = args.map { a -> String in
            switch a {
            case .value(.string(let s)): return s
            case .value(let v): return v.jsonString
            case .function: return "function"
            }
        }.joined(separator: separator)
        let ctx = contexts.last
        var fields: [(String, String)] = []
        if let ctx { fields.append(("function", ctx.functionName)) }
        if let loc = callerLocation() { fields.append(("at", loc.description)) }
        Log.lua(level, text, requestId: ctx?.requestId, fields: fields)
        return .null
    }
}
