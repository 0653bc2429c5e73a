import MoonbaseCore
import MoonbaseJSON
import MoonbaseLua
import MoonbaseStore

extension CloudService {
    /// Whether a realtime trigger is registered (`className` "" for the class-less ones).
    public func hasLiveTrigger(_ kind: CloudTriggerKind, _ className: String = "") -> Bool {
        registry.trigger(kind, className) != nil
    }

    /// Runs a realtime trigger on this thread's VM (a worker: never an I/O or WebSocket loop
    /// thread). See `LuaVM.runLiveTrigger`.
    public func runLiveTrigger(_ kind: CloudTriggerKind, className: String = "", fields: [(String, JSONValue)],
                               caller: CallerContext) throws(ParseError) -> JSONValue? {
        guard hasLiveTrigger(kind, className) else { return nil }
        let vm = try vm()
        return try metered(caller) { () throws(ParseError) -> JSONValue? in
            try vm.runLiveTrigger(kind, className: className, fields: fields, request: request(caller),
                                  limits: limits.functions)
        }
    }
}
