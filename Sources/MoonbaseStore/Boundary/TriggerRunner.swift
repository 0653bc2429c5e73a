import MoonbaseCore
import MoonbaseJSON

/// Per-request counters the store and Lua layers add to (read by accounting).
public final class RequestMeter {
    public var dbReads: Int64 = 0
    public var dbWrites: Int64 = 0
    public var luaCPUNanos: UInt64 = 0
    public init() {}
}

/// Who is calling and from where: what the store, the triggers and Lua's `req` need.
///
/// Thread-confined to the request's thread (it carries the request's meter).
public struct CallerContext {
    public var identity: Identity
    public var user: JSONObject?
    public var requestId: String
    public var ip: String
    public var headers: [(String, String)]
    public var meter: RequestMeter?

    public init(identity: Identity, user: JSONObject? = nil, requestId: String = "", ip: String = "",
                headers: [(String, String)] = [], meter: RequestMeter? = nil) {
        self.identity = identity
        self.user = user
        self.requestId = requestId
        self.ip = ip
        self.headers = headers
        self.meter = meter
    }
}

/// The data triggers as the object service sees them (implemented over MoonbaseLua, whose
/// `CloudTriggerKind` also holds realtime triggers that no write fires).
public enum TriggerKind: String, Sendable {
    case beforeSave, afterSave, beforeDelete, afterDelete, afterFind
}

/// The hook through which `ObjectService` runs Cloud Code triggers. The Lua side
/// (`CloudService`) implements it; the composition root installs it (`ObjectService.setTriggers`)
/// once Cloud Code is loaded. A before-trigger runs inside the write's transaction (its own
/// `db.*` writes join it); an after-trigger runs after commit.
public protocol TriggerRunner: Sendable {
    func hasTrigger(_ kind: TriggerKind, _ className: String) -> Bool
    /// beforeSave returns the object to store; afterSave's result is ignored.
    func runSave(_ kind: TriggerKind, className: String, object: JSONObject, original: JSONObject?,
                 caller: CallerContext) throws(ParseError) -> JSONObject
    func runDelete(_ kind: TriggerKind, className: String, object: JSONObject, caller: CallerContext) throws(ParseError)
    func runAfterFind(className: String, objects: [JSONObject], caller: CallerContext) throws(ParseError) -> [JSONObject]
}
