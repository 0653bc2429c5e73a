import MoonbaseCore
import MoonbaseJSON
import MoonbaseRealtime

/// Who a subscription is for: the identity a REST request with the same keys would have, and
/// the session token it came from (checked again before deliveries).
public struct LiveViewer: Sendable {
    public var identity: Identity
    public var sessionToken: String?
    public init(identity: Identity, sessionToken: String? = nil) {
        self.identity = identity
        self.sessionToken = sessionToken
    }
}

/// One `subscribe`: the class, the REST `where`, `keys`, `watch` and `since`.
public struct LiveSubscription: Sendable {
    public var className: String
    public var whereClause: JSONObject
    public var keys: [String]?
    public var watch: [String]?
    public var since: Int64?
}

/// One event for one subscription, already filtered for its viewer.
public struct LiveQueryEvent: Sendable {
    /// `create`, `enter`, `update`, `leave` or `delete`.
    public var op: String
    public var seq: Int64
    /// The object as a REST get by the subscriber returns it, plus `className`.
    public var object: JSONObject
    public var original: JSONObject?
    /// Where the encoded `object`/`original`/`seq` part is kept once made: the engine hands
    /// the same one to every subscriber that receives this same event.
    public var encoding: EncodedOnce
    public init(op: String, seq: Int64, object: JSONObject, original: JSONObject?, encoding: EncodedOnce = EncodedOnce()) {
        self.op = op
        self.seq = seq
        self.object = object
        self.original = original
        self.encoding = encoding
    }
}

/// Where the engine sends one subscription's events (must not block).
public protocol LiveQueryEventTarget: AnyObject, Sendable {
    /// Queues the event; false when the connection's send queue is full (it is being dropped).
    func deliver(_ event: LiveQueryEvent) -> Bool
    /// The engine ended the subscription (revoked session: 209; slow consumer: reconnect).
    func terminated(_ error: ParseError, reconnect: Bool)
}

/// The matching and visibility engine as the WebSocket transport uses it.
public protocol LiveQueryEngine: Sendable {
    /// Validates and starts a subscription: replays the changes after `since` (in seq order),
    /// then live events, to `target`. Called on a worker.
    /// - Throws: refusals (an operator that cannot be evaluated on one object, a field the
    ///   viewer may not read → 119, an expired `since` → 160, 209 for a dead session).
    func subscribe(_ s: LiveSubscription, viewer: LiveViewer, target: any LiveQueryEventTarget) throws(ParseError) -> UInt64
    func unsubscribe(_ id: UInt64)
}
