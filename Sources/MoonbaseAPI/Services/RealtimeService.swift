import MoonbaseAuth
import MoonbaseCore
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseQuota
import MoonbaseRealtime
import MoonbaseStore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Realtime settings, from the environment (decimals allowed where a duration is given).
public struct RealtimeConfig: Sendable {
    /// How long delete tombstones stay in the change feed (`MOONBASE_CHANGES_RETENTION_DAYS`).
    public var retentionDays = 30.0
    /// Seconds between SSE keep-alive comments (`MOONBASE_SSE_KEEPALIVE_SECONDS`).
    public var keepAliveSeconds = 15.0
    /// Open SSE streams per process, per client IP and per user.
    public var maxStreams = 10_000
    public var maxStreamsPerIP = 1_000
    public var maxStreamsPerUser = 100
    /// Bytes an SSE stream may have waiting for a slow reader before it is dropped.
    public var streamBufferBytes = 1 << 20
    /// How often the host purges expired tombstones (at least once a minute).
    public var purgeIntervalSeconds = 30.0

    public init() {}

    public static func fromEnvironment() -> RealtimeConfig {
        var c = RealtimeConfig()
        func env(_ name: String) -> Double? {
            guard let p = getenv(name), let d = Double(String(cString: p)), d.isFinite, d >= 0 else { return nil }
            return d
        }
        if let d = env("MOONBASE_CHANGES_RETENTION_DAYS") { c.retentionDays = d }
        if let d = env("MOONBASE_SSE_KEEPALIVE_SECONDS"), d > 0 { c.keepAliveSeconds = d }
        if let d = env("MOONBASE_SSE_MAX_STREAMS") { c.maxStreams = Int(d) }
        if let d = env("MOONBASE_SSE_MAX_STREAMS_PER_IP") { c.maxStreamsPerIP = Int(d) }
        if let d = env("MOONBASE_SSE_MAX_STREAMS_PER_USER") { c.maxStreamsPerUser = Int(d) }
        if let d = env("MOONBASE_SSE_BUFFER_BYTES"), d >= 1024 { c.streamBufferBytes = Int(d) }
        if let d = env("MOONBASE_CHANGES_PURGE_SECONDS"), d > 0 { c.purgeIntervalSeconds = min(d, 60) }
        return c
    }

    var retentionMillis: Int64 { Int64(retentionDays * 86_400_000) }
}

/// What the realtime engine asks the server: sessions (through the auth service, whose cache
/// is invalidated by logout and password changes), class permissions, and `afterFind`.
struct HostViewers: ViewerHost {
    let auth: AuthService
    let store: any Store
    unowned(unsafe) let cloud: CloudService
    // unowned(unsafe): the Services graph owns the cloud service for the process's lifetime.

    func viewer(sessionToken: String) throws(ParseError) -> Viewer {
        guard let s = try auth.resolveSession(sessionToken) else { throw ParseError(.invalidSessionToken, "Invalid session token") }
        return Viewer(identity: .user(s.userId), sessionToken: sessionToken)
    }

    func isCurrent(_ viewer: Viewer) -> Bool {
        guard let t = viewer.sessionToken else { return true }
        guard let s = try? auth.resolveSession(t) else { return false }
        return s.userId == viewer.identity.userId
    }

    /// The viewer's roles (hierarchy expanded), from the store's per-user role cache, which any
    /// committed `_Role` write invalidates: a subscriber added to or removed from a role sees the
    /// change at its next event.
    func roleNames(of identity: Identity) -> Set<String> {
        guard let uid = identity.userId else { return [] }
        return Set((try? store.roles(ofUser: uid)) ?? [])
    }

    func classPermissions(_ className: String) -> JSONObject? { store.schema(className)?.clp }

    func hasAfterFind(_ className: String) -> Bool { cloud.hasTrigger(.afterFind, className) }

    func afterFind(className: String, objects: [JSONObject], viewer: Viewer) throws(ParseError) -> [JSONObject] {
        let user = viewer.sessionToken.flatMap { try? auth.resolveSession($0) }?.user
        // The trigger's own db.* calls run as the subscriber, roles included.
        var identity = viewer.identity
        if let uid = identity.userId { identity = .user(uid, roles: Array(viewer.roles).sorted()) }
        return try cloud.runAfterFind(className: className, objects: objects,
                                      caller: CallerContext(identity: identity, user: user))
    }
}

/// The realtime side of the host: the change hub installed on the store, SSE stream limits and
/// keep-alives, the tombstone purge, and realtime metrics.
public final class RealtimeService: Sendable {
    public let config: RealtimeConfig
    public let hub: ChangeHub
    let store: any Store
    let clock: any HostClock
    let streams = Mutex<StreamTable>(StreamTable())
    let stopping = Atomic<Bool>(false)
    let started = Atomic<Bool>(false)
    /// Event bytes written to SSE streams.
    let sseBytesOut = Atomic<Int>(0)
    /// Other transports' gauges (`addTransport`).
    let transports = Mutex<[Transport]>([])

    struct Transport {
        let name: String
        let connections: @Sendable () -> Int
        let bytesOut: @Sendable () -> Int
    }

    struct StreamTable {
        var open: [ObjectIdentifier: SSESink] = [:]
        var perIP: [String: Int] = [:]
        var perUser: [String: Int] = [:]
    }

    public init(store: any Store, auth: AuthService, cloud: CloudService, metrics: ServerMetrics,
         config: RealtimeConfig = .fromEnvironment()) throws(ParseError) {
        self.config = config
        self.store = store
        self.clock = cloud.clock
        hub = try ChangeHub(store: store, visibility: Visibility(host: HostViewers(auth: auth, store: store, cloud: cloud)))
        store.setChangeListener(hub)
        let hub = self.hub
        let reg = metrics.registry
        reg.counter("moonbase_realtime_events_total", help: "Realtime events delivered to subscribers.") {
            [MetricSample(value: Double(hub.eventsDelivered.load(ordering: .relaxed)))]
        }
        reg.counter("moonbase_realtime_dropped_total", help: "Realtime consumers dropped for falling behind.") {
            [MetricSample(value: Double(hub.slowConsumersDropped.load(ordering: .relaxed)))]
        }
        reg.gauge("moonbase_realtime_subscriptions", help: "Open realtime subscriptions.") {
            [MetricSample(value: Double(hub.subscriptionCount.load(ordering: .relaxed)))]
        }
        reg.gauge("moonbase_realtime_connections", help: "Open realtime connections.", labels: ["transport"]) { [unowned self] in
            [MetricSample(labels: ["sse"], value: Double(self.streams.withLock { $0.open.count }))]
                + self.transports.withLock { $0 }.map { MetricSample(labels: [$0.name], value: Double($0.connections())) }
        }
        reg.counter("moonbase_realtime_bytes_total", help: "Event bytes sent to realtime subscribers.", labels: ["transport"]) {
            [unowned self] in
            [MetricSample(labels: ["sse"], value: Double(self.sseBytesOut.load(ordering: .relaxed)))]
                + self.transports.withLock { $0 }.map { MetricSample(labels: [$0.name], value: Double($0.bytesOut())) }
        }
    }

    /// Lets another transport (the WebSocket one) report its open connections and event bytes
    /// in the same `/metrics` families, under its own `transport` label.
    public func addTransport(_ name: String, connections: @escaping @Sendable () -> Int, bytesOut: @escaping @Sendable () -> Int) {
        transports.withLock { $0.append(Transport(name: name, connections: connections, bytesOut: bytesOut)) }
    }

    /// Starts the keep-alive and purge thread (serving hosts only).
    public func start() {
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let me = self
        if !spawnThread({ me.housekeeping() }) { Log.error("cannot start a realtime thread") }
    }

    /// Ends every SSE stream and stops the background work.
    public func stop() {
        stopping.store(true, ordering: .releasing)
        for s in streams.withLock({ Array($0.open.values) }) { s.stream.finish() }
        hub.stop()
    }

    /// Compacts the feed (rows superseded by later writes of the same object), then purges
    /// expired tombstones. - Returns: how many tombstones were removed.
    @discardableResult
    public func purge() -> Int {
        let cutoff = clock.nowMillis() - config.retentionMillis
        do throws(ParseError) {
            // Short transactions of 10,000 rows each, so writers wait little; bounded per pass.
            for _ in 0..<50 where try store.compactChangeFeed(batch: 10_000) > 0 {}
            return try store.purgeChangeFeed(before: cutoff)
        } catch {
            Log.warn("change feed purge failed: \(error.message)")
            return 0
        }
    }

    private func housekeeping() {
        var lastPurge: UInt64 = 0
        var lastBeat = monotonicNanos()
        while !stopping.load(ordering: .acquiring) {
            usleep(100_000)
            let now = monotonicNanos()
            if now &- lastPurge >= UInt64(config.purgeIntervalSeconds * 1e9) {
                purge()
                lastPurge = now
            }
            if now &- lastBeat >= UInt64(config.keepAliveSeconds * 1e9) {
                lastBeat = now
                for s in streams.withLock({ Array($0.open.values) }) { s.keepAlive() }
            }
        }
    }

    // MARK: SSE stream accounting

    /// Registers a new stream or throws 155 when a cap is reached.
    func admit(_ sink: SSESink) throws(ParseError) {
        let c = config
        try streams.withLock { (t) throws(ParseError) in
            guard t.open.count < c.maxStreams else { throw ParseError(.requestLimitExceeded, "too many realtime connections on this server") }
            guard t.perIP[sink.ip, default: 0] < c.maxStreamsPerIP else {
                throw ParseError(.requestLimitExceeded, "too many realtime connections from this address")
            }
            if let u = sink.userId, t.perUser[u, default: 0] >= c.maxStreamsPerUser {
                throw ParseError(.requestLimitExceeded, "too many realtime connections for this user")
            }
            t.open[ObjectIdentifier(sink)] = sink
            t.perIP[sink.ip, default: 0] += 1
            if let u = sink.userId { t.perUser[u, default: 0] += 1 }
        }
    }

    func release(_ sink: SSESink) {
        streams.withLock { t in
            guard t.open.removeValue(forKey: ObjectIdentifier(sink)) != nil else { return }
            t.perIP[sink.ip, default: 1] -= 1
            if t.perIP[sink.ip] == 0 { t.perIP[sink.ip] = nil }
            if let u = sink.userId {
                t.perUser[u, default: 1] -= 1
                if t.perUser[u] == 0 { t.perUser[u] = nil }
            }
        }
    }
}

/// One SSE stream: formats the hub's events as `text/event-stream` into its bounded body.
final class SSESink: EventSink, Sendable {
    let stream: HTTPStreamBody
    let ip: String
    let userId: String?
    let account: Account
    unowned(unsafe) let service: RealtimeService
    // unowned(unsafe): the service outlives every stream (it ends them at shutdown).
    let subscription = Atomic<UInt64>(0)
    let quota: Quota

    init(stream: HTTPStreamBody, ip: String, userId: String?, service: RealtimeService, quota: Quota) {
        self.stream = stream
        self.ip = ip
        self.userId = userId
        self.account = Account.caller(userId: userId, ip: ip)
        self.service = service
        self.quota = quota
    }

    /// `id: SEQ`, `event: KIND`, `data: {"seq","className","object","original"?}`.
    static func format(_ e: LiveEvent) -> [UInt8] {
        var data = JSONObject()
        data["seq"] = .int(e.seq)
        data["className"] = .string(e.className)
        data["object"] = .object(e.object)
        if let o = e.original { data["original"] = .object(o) }
        var out = Array("id: \(e.seq)\nevent: \(e.kind.rawValue)\ndata: ".utf8)
        out += JSON.encode(.object(data))  // compact JSON has no raw newline
        out += Array("\n\n".utf8)
        return out
    }

    func deliver(_ event: LiveEvent, subscription: SubscriptionID) -> Bool {
        let bytes = Self.format(event)
        guard stream.write(bytes) else { return false }
        service.sseBytesOut.add(bytes.count, ordering: .relaxed)
        // Delivered events cost no unit; they are counted on the subscriber's account.
        quota.recordEvent(account: account, bytes: Int64(bytes.count))
        return true
    }

    func terminate(subscription: SubscriptionID, error: ParseError, reconnect: Bool) {
        if error.code == .internalError && reconnect && stream.bufferedBytes + 256 > stream.maxBuffered {
            stream.abort()  // a reader too slow to take even the error
            return
        }
        var body = JSONObject()
        body["code"] = .int(Int64(error.code.rawValue))
        body["error"] = .string(error.message)
        body["reconnect"] = .bool(reconnect)
        stream.write(Array("event: error\ndata: ".utf8) + JSON.encode(.object(body)) + Array("\n\n".utf8))
        stream.finish()
    }

    func keepAlive() { stream.write(Array(": keep-alive\n\n".utf8)) }
}
