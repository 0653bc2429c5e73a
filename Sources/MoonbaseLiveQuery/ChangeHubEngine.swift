import MoonbaseAPI
import MoonbaseCore
import MoonbaseJSON
import MoonbaseRealtime

/// The realtime engine (`ChangeHub`: matching, visibility, replay) behind the WebSocket
/// transport's `LiveQueryEngine`.
public final class ChangeHubEngine: LiveQueryEngine {
    public let hub: ChangeHub

    public init(hub: ChangeHub) { self.hub = hub }

    public func subscribe(_ s: LiveSubscription, viewer: LiveViewer, target: any LiveQueryEventTarget) throws(ParseError) -> UInt64 {
        let spec = SubscriptionSpec(className: s.className, whereClause: .object(s.whereClause), keys: s.keys,
                                    watch: s.watch, since: s.since)
        return try hub.subscribe(spec, viewer: Viewer(identity: viewer.identity, sessionToken: viewer.sessionToken),
                                 sink: HubSink(target))
    }

    public func unsubscribe(_ id: UInt64) { hub.unsubscribe(id) }
}

/// One subscription's sink: forwards the hub's events to the client's subscription.
final class HubSink: EventSink {
    weak let target: (any LiveQueryEventTarget)?

    init(_ target: any LiveQueryEventTarget) { self.target = target }

    func deliver(_ event: LiveEvent, subscription: SubscriptionID) -> Bool {
        guard let target else { return true }
        return target.deliver(LiveQueryEvent(op: event.kind.rawValue, seq: event.seq, object: event.object,
                                             original: event.original))
    }

    func terminate(subscription: SubscriptionID, error: ParseError, reconnect: Bool) {
        target?.terminated(error, reconnect: reconnect)
    }
}

/// What the engine needs to know about viewers, answered by the server's services: sessions,
/// class permissions and the `afterFind` trigger (run on the engine's delivery thread, never on
/// an I/O thread), and role memberships.
public struct ServicesViewerHost: ViewerHost {
    let services: Services

    public init(services: Services) { self.services = services }

    public func viewer(sessionToken: String) throws(ParseError) -> Viewer {
        guard let s = try services.auth.resolveSession(sessionToken) else {
            throw ParseError(.invalidSessionToken, "Invalid session token")
        }
        let identity = try services.store.identity(forUser: s.userId)
        return Viewer(identity: identity, sessionToken: sessionToken, roles: Set(identity.roles))
    }

    public func isCurrent(_ viewer: Viewer) -> Bool {
        guard let t = viewer.sessionToken else { return true }
        do throws(ParseError) {
            return try services.auth.resolveSession(t)?.userId == viewer.identity.userId
        } catch {
            return false
        }
    }

    /// Asked before each delivery: the store caches memberships per user and clears the cache on
    /// every `_Role` write, so a user removed from a role stops receiving that role's objects at
    /// the next event. A lookup that fails admits no role (fail closed).
    public func roleNames(of identity: Identity) -> Set<String> {
        guard let uid = identity.userId else { return [] }
        do throws(ParseError) {
            return Set(try services.store.identity(forUser: uid).roles)
        } catch {
            return []
        }
    }

    public func classPermissions(_ className: String) -> JSONObject? { services.store.catalog.schema(className)?.clp }

    public func hasAfterFind(_ className: String) -> Bool { services.cloud.hasTrigger(.afterFind, className) }

    public func afterFind(className: String, objects: [JSONObject], viewer: Viewer) throws(ParseError) -> [JSONObject] {
        var user: JSONObject?
        if let t = viewer.sessionToken { user = try services.auth.resolveSession(t)?.user }
        let caller = CallerContext(identity: viewer.identity, user: user, requestId: "livequery")
        return try services.cloud.runAfterFind(className: className, objects: objects, caller: caller)
    }
}
