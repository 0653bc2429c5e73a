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
                                             original: event.original, encoding: event.encoding))
    }

    func terminate(subscription: SubscriptionID, error: ParseError, reconnect: Bool) {
        target?.terminated(error, reconnect: reconnect)
    }
}
