import MoonbaseCore
import MoonbaseJSON

/// The `cloud.*` declarations, in the order of the Lua surface.
public enum CloudDeclaration: String, CaseIterable, Sendable {
    case define, job, route, beforeSave, afterSave, beforeDelete, afterDelete, afterFind
    case index, textIndex, classPermissions, sendEmail
    case beforeConnect, beforeSubscribe, onLiveQueryEvent
}

/// Trigger kinds (`cloud.beforeSave(className, fn)`, …).
public enum CloudTriggerKind: String, Sendable, CaseIterable {
    case beforeSave, afterSave, beforeDelete, afterDelete, afterFind
    /// Realtime: `cloud.beforeConnect(fn)` and `cloud.onLiveQueryEvent(fn)` take no class
    /// (registered under the class name ""); `cloud.beforeSubscribe(Class, fn)` does.
    case beforeConnect, beforeSubscribe, onLiveQueryEvent

    /// This kind's bit in a set of kinds (`Generation.triggerKinds`).
    var bit: UInt16 {
        switch self {
        case .beforeSave: return 1
        case .afterSave: return 1 << 1
        case .beforeDelete: return 1 << 2
        case .afterDelete: return 1 << 3
        case .afterFind: return 1 << 4
        case .beforeConnect: return 1 << 5
        case .beforeSubscribe: return 1 << 6
        case .onLiveQueryEvent: return 1 << 7
        }
    }
}

/// One field rule of a function's `fields` validator (Parse's).
public struct CloudFieldRule: Sendable, Hashable {
    public var name: String
    /// `string`, `number`, `boolean`, `object`, `array` or `date` (nil: any type).
    public var type: String?
    public var required: Bool
    /// Allowed values.
    public var options: [JSONValue]?
    /// Applied to `req.params` when the field is missing.
    public var defaultValue: JSONValue?
}

/// Options of `cloud.define` / `cloud.job` / `cloud.route` (Parse's validator options plus limits).
public struct CloudFunctionOptions: Sendable, Hashable {
    public var requireUser = false
    public var requireMaster = false
    public var validateMasterKey = false
    public var fields: [CloudFieldRule] = []
    /// `rateLimit = {perMinute = N}`: enforced by the quota module.
    public var rateLimitPerMinute: Int?
    public var timeoutMs: Int64?
    public var maxMemoryMB: Int64?
    public var maxDbOps: Int64?
    public var maxInstructions: Int64?
    public var writerHoldMs: Int64?
    public init() {}
}

/// A registered function, job, route or trigger.
public struct CloudHandlerInfo: Sendable, Hashable {
    public var name: String
    public var options: CloudFunctionOptions
    public var location: LuaLocation?
}

/// A `cloud.route(method, path, fn)`.
public struct CloudRouteInfo: Sendable, Hashable {
    public var method: String
    public var path: String
    public var options: CloudFunctionOptions
    public var location: LuaLocation?
    /// Path segments; `:name` segments capture.
    public var segments: [String] { path.split(separator: "/", omittingEmptySubsequences: true).map(String.init) }

    /// The captured `:params` when `path` matches this route.
    public func match(_ path: String) -> [String: String]? {
        let want = segments
        let got = path.split(separator: "/", omittingEmptySubsequences: true)
        guard want.count == got.count else { return nil }
        var params: [String: String] = [:]
        for (w, g) in zip(want, got) {
            if w.hasPrefix(":") { params[String(w.dropFirst())] = String(g) }
            else if w != g { return nil }
        }
        return params
    }
}

/// `cloud.index(class, fields, {unique=})` / `cloud.textIndex(class, fields)`.
public struct CloudIndexDeclaration: Sendable, Hashable {
    public var className: String
    public var fields: [String]
    public var unique: Bool
    public var text: Bool
    public var location: LuaLocation?
}

/// `cloud.classPermissions(class, table)`.
public struct CloudClassPermissions: Sendable, Hashable {
    public var className: String
    public var permissions: JSONValue
    public var location: LuaLocation?
}

/// Everything the `functions/*.lua` files declared, as plain values the host applies
/// (idempotently) on load and serves `GET /admin/functions` from.
public struct CloudRegistry: Sendable, Hashable {
    public var functions: [String: CloudHandlerInfo] = [:]
    public var jobs: [String: CloudHandlerInfo] = [:]
    public var routes: [CloudRouteInfo] = []
    /// Keyed by `"beforeSave Post"`.
    public var triggers: [String: CloudHandlerInfo] = [:]
    public var indexes: [CloudIndexDeclaration] = []
    public var classPermissions: [CloudClassPermissions] = []
    /// `cloud.sendEmail(fn)`: the mail hook (password reset and verification mails).
    public var emailHook: CloudHandlerInfo?
    public init() {}

    public static func triggerKey(_ kind: CloudTriggerKind, _ className: String) -> String {
        "\(kind.rawValue) \(className)"
    }

    public func trigger(_ kind: CloudTriggerKind, _ className: String) -> CloudHandlerInfo? {
        triggers[Self.triggerKey(kind, className)]
    }

    /// The route for `method path` and its captured parameters (exact segments win over
    /// `:params` by declaration order; `HEAD` falls back to `GET`).
    public func matchRoute(method: String, path: String) -> (CloudRouteInfo, [String: String])? {
        let m = method.uppercased()
        for r in routes where r.method == m || r.method == "*" {
            if let p = r.match(path) { return (r, p) }
        }
        if m == "HEAD" { return matchRoute(method: "GET", path: path) }
        return nil
    }
}

/// Key of a handler's function reference inside one VM.
enum CloudHandlerKey: Hashable {
    case function(String)
    case job(String)
    case route(String, String)
    case trigger(String)
    case emailHook
}
