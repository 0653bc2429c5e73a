/// Who a request is charged to.
///
/// Every charged request costs one unit to `.app` (the plan) and is also attributed to one caller
/// account: `.user(objectId)` when it carries a valid session (or `Authorization: Bearer`) token,
/// else `.ip(address)`. Per-minute limits apply to the caller account; the monthly quota applies
/// to the app.
public enum Account: Hashable, Sendable, CustomStringConvertible {
    case app
    case user(String)
    case ip(String)

    /// The stored key: `app`, `user:<objectId>` or `ip:<address>`.
    public var key: String {
        switch self {
        case .app: return "app"
        case .user(let id): return "user:" + id
        case .ip(let address): return "ip:" + address
        }
    }

    /// Parses a stored key; nil for anything else.
    public init?(key: String) {
        if key == "app" { self = .app; return }
        if key.hasPrefix("user:"), key.utf8.count > 5 { self = .user(String(key.dropFirst(5))); return }
        if key.hasPrefix("ip:"), key.utf8.count > 3 { self = .ip(String(key.dropFirst(3))); return }
        return nil
    }

    /// The caller account for a request: the user when known, else the client address.
    public static func caller(userId: String?, ip: String) -> Account {
        if let userId, !userId.isEmpty { return .user(userId) }
        return .ip(ip)
    }

    public var description: String { key }
}

/// What a request hit, for the per-function usage rows. The key scheme (stable: it is stored):
///
/// | request                                   | key                     |
/// |-------------------------------------------|-------------------------|
/// | `POST /parse/functions/stats`             | `function:stats`        |
/// | `POST /parse/jobs/cleanup` (and cron runs)| `job:cleanup`           |
/// | a Lua `cloud.route` handler               | `route:GET /hello/:id`  |
/// | `/parse/classes/Post…`                    | `class:Post`            |
/// | users, login, sessions, files, batch, …   | `api:users`, `api:login`, `api:batch`, … |
/// | `/admin/…`                                | `admin:usage`, `admin:functions`, …     |
///
/// Routes use the *pattern* they were declared with, never the concrete path, so the number of
/// keys stays bounded.
public struct UsageTarget: Hashable, Sendable, CustomStringConvertible {
    /// The stored key, e.g. `function:stats`.
    public let key: String

    /// A key as stored (for reading rows back).
    public init(key: String) { self.key = key }

    public static func function(_ name: String) -> UsageTarget { UsageTarget(key: "function:" + name) }
    public static func job(_ name: String) -> UsageTarget { UsageTarget(key: "job:" + name) }
    public static func route(method: String, pattern: String) -> UsageTarget {
        UsageTarget(key: "route:" + method + " " + pattern)
    }
    public static func `class`(_ name: String) -> UsageTarget { UsageTarget(key: "class:" + name) }
    /// Built-in REST endpoints other than classes: `api:users`, `api:login`, `api:batch`, `api:files`…
    public static func api(_ name: String) -> UsageTarget { UsageTarget(key: "api:" + name) }
    /// Admin endpoints: `admin:usage`, `admin:functions`…
    public static func admin(_ name: String) -> UsageTarget { UsageTarget(key: "admin:" + name) }

    public var description: String { key }
}
