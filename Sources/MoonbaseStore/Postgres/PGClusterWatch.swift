import MoonbaseCore
import MoonbasePostgres
import Synchronization

/// The one listening connection through which the hosts sharing a database tell one another
/// what changed: a class schema (`mb_schema`, the class name), the change feed's head
/// (`mb_changes`, the highest committed seq), Parse Config (`mb_config`), the Cloud Code bundle
/// (`mb_code`, its version). Each part of the store registers what to do on its channel and
/// after a lost connection came back (notifications sent meanwhile were missed, so caches are
/// dropped and the feed is read from where this host stopped).
///
/// Started on first use; a failed start is tried again on the next use. Handlers run on the
/// listener's thread, one at a time: they must only note or enqueue.
final class PGClusterWatch: Sendable {
    static let schemaChannel = "mb_schema"
    static let changesChannel = "mb_changes"
    static let configChannel = "mb_config"
    static let codeChannel = "mb_code"
    static let channels = [schemaChannel, changesChannel, configChannel, codeChannel]

    private let listener = Mutex<PGListener?>(nil)
    private let listening = Atomic<Bool>(false)
    private let stopped = Atomic<Bool>(false)
    private let handlers = Mutex<[String: [@Sendable (String) -> Void]]>([:])
    private let reconnectHandlers = Mutex<[@Sendable () -> Void]>([])

    /// Whether notifications reach this host (only then may it cache what others can change).
    var isListening: Bool { listening.load(ordering: .acquiring) }

    /// The server process of the listening connection (0 when none): tests end it to check
    /// that the host catches up.
    var backendPID: Int32 { listener.withLock { $0?.backendPID ?? 0 } }

    /// Runs `f` with the payload of every notification on `channel` (this host's own too).
    func on(_ channel: String, _ f: @escaping @Sendable (String) -> Void) {
        handlers.withLock { $0[channel, default: []].append(f) }
    }

    /// Runs `f` each time the listening connection came back after a loss.
    func onReconnect(_ f: @escaping @Sendable () -> Void) { reconnectHandlers.withLock { $0.append(f) } }

    /// Starts listening unless it already does (a failed start is tried again next time).
    func ensureStarted(url: String) {
        guard !listening.load(ordering: .acquiring), !stopped.load(ordering: .acquiring) else { return }
        listener.withLock { l in
            guard l == nil, !stopped.load(ordering: .acquiring) else { return }
            // The listener holds this watch until `stop` drops the listener.
            guard let new = try? PGListener(url: url, channels: Self.channels,
                                            onNotify: { [self] channel, payload in
                                                for f in handlers.withLock({ $0[channel] ?? [] }) { f(payload) }
                                            },
                                            onReconnect: { [self] in for f in reconnectHandlers.withLock({ $0 }) { f() } }) else { return }
            do throws(ParseError) { try new.start() } catch { return }
            l = new
            listening.store(true, ordering: .releasing)
        }
    }

    func stop() {
        stopped.store(true, ordering: .releasing)
        listening.store(false, ordering: .releasing)
        let l = listener.withLock { l -> PGListener? in defer { l = nil }; return l }
        l?.stop()
    }
}
