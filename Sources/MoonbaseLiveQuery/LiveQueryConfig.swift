/// Realtime limits (all configurable; the realtime pool is separate from HTTP's connections).
public struct LiveQueryConfig: Sendable {
    /// Upgraded WebSocket connections held by the process.
    public var maxConnections = 10_000
    /// Connections from one client address.
    public var maxConnectionsPerIP = 1_000
    /// Connected clients of one user (counted at `connect`).
    public var maxConnectionsPerUser = 100
    /// Live subscriptions on one connection.
    public var maxSubscriptionsPerConnection = 100
    /// One client message (a WebSocket message, all its frames).
    public var maxMessageBytes = 64 << 10
    /// Bytes queued for one connection and not yet taken by its socket; beyond it the client is
    /// dropped with an `error` carrying `reconnect: true`.
    public var sendQueueBytes = 1 << 20
    /// Ping period; a client that misses two pongs is dropped.
    public var pingIntervalMillis = 10_000
    /// Epoll threads holding the sockets.
    public var loops = 1

    public init() {}
}

#if canImport(Glibc)
import Glibc
#endif

extension LiveQueryConfig {
    /// The defaults, overridden by the `MOONBASE_LIVEQUERY_*` variables (positive integers;
    /// anything else is ignored with the default kept). Full names, so a search finds them.
    public static func fromEnvironment() -> LiveQueryConfig {
        var c = LiveQueryConfig()
        func int(_ name: String) -> Int? {
            guard let p = getenv(name), let v = Int(String(cString: p)), v > 0 else { return nil }
            return v
        }
        if let v = int("MOONBASE_LIVEQUERY_MAX_CONNECTIONS") { c.maxConnections = v }
        if let v = int("MOONBASE_LIVEQUERY_MAX_PER_IP") { c.maxConnectionsPerIP = v }
        if let v = int("MOONBASE_LIVEQUERY_MAX_PER_USER") { c.maxConnectionsPerUser = v }
        if let v = int("MOONBASE_LIVEQUERY_MAX_SUBSCRIPTIONS") { c.maxSubscriptionsPerConnection = v }
        if let v = int("MOONBASE_LIVEQUERY_MAX_MESSAGE_BYTES") { c.maxMessageBytes = v }
        if let v = int("MOONBASE_LIVEQUERY_SEND_QUEUE_BYTES") { c.sendQueueBytes = v }
        if let v = int("MOONBASE_LIVEQUERY_PING_MS") { c.pingIntervalMillis = v }
        return c
    }
}
