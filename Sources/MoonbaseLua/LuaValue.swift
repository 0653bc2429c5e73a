import MoonbaseCore
import MoonbaseJSON

/// A Lua function handed to the host (e.g. the `fn` of `db.transaction(fn)`).
///
/// Valid only during the host call that received it, on the VM that passed it; call it with
/// `LuaCallContext.vm.call(_:_:)`.
public struct LuaFunctionRef: Sendable, Hashable {
    public let ref: Int32
}

/// An argument of a host function: a JSON value (tables arrive JSON-encoded by C; `nil` and
/// `json.null` both arrive as `.null`) or a Lua function.
public enum LuaValue: Sendable, Hashable {
    case value(JSONValue)
    case function(LuaFunctionRef)

    /// The JSON value, or nil for a function.
    public var json: JSONValue? { if case .value(let v) = self { return v } else { return nil } }
    public var stringValue: String? { json?.stringValue }
    public var objectValue: JSONObject? { json?.objectValue }
    public var function: LuaFunctionRef? { if case .function(let f) = self { return f } else { return nil } }
}

/// Where a handler or declaration was defined, or where an error was raised.
public struct LuaLocation: Sendable, Hashable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public init(file: String, line: Int) { self.file = file; self.line = line }

    /// Parses `"functions/a.lua:3"`.
    public init?(_ text: String) {
        guard let colon = text.lastIndex(of: ":"), let n = Int(text[text.index(after: colon)...]) else { return nil }
        file = String(text[..<colon])
        line = n
    }
    public var description: String { "\(file):\(line)" }
}

/// A file that failed to load: its file:line and message (`GET /admin/functions`, `moonbase check`).
public struct LuaLoadError: Error, Sendable, Hashable, CustomStringConvertible {
    public var file: String
    public var line: Int?
    public var message: String
    public init(file: String, line: Int?, message: String) {
        self.file = file
        self.line = line
        self.message = message
    }
    public var description: String {
        if let line { return "\(file):\(line): \(message)" }
        return "\(file): \(message)"
    }
}
