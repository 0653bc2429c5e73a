import MoonbaseCore
import MoonbaseJSON
import Synchronization

/// What a transport asks for: a class, a `where` as in REST find, the fields to return, the
/// fields to watch, and an optional `since` (exclusive seq: replay the changes after it, then
/// go live, with no gap and no duplicate).
public struct SubscriptionSpec: Sendable {
    public var className: String
    public var whereClause: JSONValue?
    /// Fields returned in events (nil: all the viewer may read).
    public var keys: [String]?
    /// Updates and creates that change none of these fields are not sent (nil: all are).
    public var watch: [String]?
    /// Replay changes with `seq > since` first. `0` means from the beginning.
    public var since: Int64?

    public init(className: String, whereClause: JSONValue? = nil, keys: [String]? = nil,
                watch: [String]? = nil, since: Int64? = nil) {
        self.className = className
        self.whereClause = whereClause
        self.keys = keys
        self.watch = watch
        self.since = since
    }
}

/// The event kinds of Parse LiveQuery.
public enum LiveEventKind: String, Sendable {
    case create, enter, update, leave, delete
}

/// One event for one subscription: the object as a REST get by the subscriber returns it,
/// plus `className`; `original` for update/enter/leave.
public struct LiveEvent: Sendable {
    // Constants: `encoding` is made from them once.
    public let kind: LiveEventKind
    public let seq: Int64
    public let className: String
    public let object: JSONObject
    public let original: JSONObject?
    /// The transport's encoding of this event, made once and shared by every subscriber the
    /// hub hands this same event (same shape, same viewer).
    public let encoding = EncodedOnce()

    public init(kind: LiveEventKind, seq: Int64, className: String, object: JSONObject, original: JSONObject? = nil) {
        self.kind = kind
        self.seq = seq
        self.className = className
        self.object = object
        self.original = original
    }
}

/// Bytes computed by the first caller and returned to the others.
public final class EncodedOnce: Sendable {
    private let bytes = Mutex<[UInt8]?>(nil)

    public init() {}

    public func get(_ make: () -> [UInt8]) -> [UInt8] {
        bytes.withLock { b in
            if let b { return b }
            let made = make()
            b = made
            return made
        }
    }
}

/// Identifies one subscription in a `ChangeHub` (unique for the life of the process).
public typealias SubscriptionID = UInt64

/// Where the hub sends a subscription's events: the transport's bounded outgoing queue.
///
/// Both methods are called on the hub's delivery thread and must not block.
public protocol EventSink: AnyObject, Sendable {
    /// Queues one event. Returns false when the queue is full: the hub then ends every
    /// subscription of this sink with `terminate(…, reconnect: true)` (a slow consumer).
    func deliver(_ event: LiveEvent, subscription: SubscriptionID) -> Bool
    /// The hub ended the subscription: 209 (session revoked or expired), 1 with
    /// `reconnect: true` (slow consumer or the hub's own backlog overflowed: resume with the
    /// last seq). The subscription is already removed when this is called.
    func terminate(subscription: SubscriptionID, error: ParseError, reconnect: Bool)
}
