import MoonbaseCore
import MoonbaseJSON

extension LuaVM {
    /// Runs a realtime trigger with `fields` added to `req` (`event`, `clientId`, `query`, ...).
    /// - `beforeSubscribe`: returns `req.query` as the trigger left it (it may edit it).
    /// - `beforeConnect`, `onLiveQueryEvent`: return nil.
    /// Returns nil without running anything when no such trigger is registered.
    /// - Throws: the trigger's `cloud.error` (its code and message reach the client).
    public func runLiveTrigger(_ kind: CloudTriggerKind, className: String = "", fields: [(String, JSONValue)],
                               request: CloudRequest, limits: LuaLimits = .functionDefaults) throws(ParseError) -> JSONValue? {
        let key = CloudRegistry.triggerKey(kind, className)
        guard let ref = handlerRefs[.trigger(key)] else { return nil }
        var extra: [(String, JSONValue)] = [("triggerName", .string(kind.rawValue))]
        if !className.isEmpty { extra.append(("className", .string(className))) }
        extra.append(contentsOf: fields)
        let ctx = makeContext(identity: request.identity, user: request.user, requestId: request.requestId,
                              name: key, limits: limits)
        let mode: LuaResultMode = kind == .beforeSubscribe ? .field("query") : .returnValue
        let v = try invoke(ref: ref, args: request.arguments(extra), mode: mode, context: ctx)
        guard kind == .beforeSubscribe else { return nil }
        guard v.objectValue != nil else {
            throw ParseError(.scriptFailed, "beforeSubscribe \(className): req.query must stay a table")
        }
        return v
    }
}
