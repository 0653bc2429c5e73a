import MoonbaseAPI
import MoonbaseAuth
import MoonbaseCore
import MoonbaseCrypto
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota
import MoonbaseRealtime
import MoonbaseStore
import Synchronization

/// One LiveQuery client (one WebSocket): its session, subscriptions and the queue of messages
/// waiting for a worker. Messages of one client are handled in order, one at a time.
///
/// Thread-safety: all mutable state behind `state`.
final class LiveClient: Sendable {
    unowned let server: LiveQueryServer
    let connection: WebSocketConnection
    let clientId: String
    let ip: String

    struct State {
        var connected = false
        var connecting = false
        var identity: Identity = .anonymous
        var user: JSONObject?
        var sessionToken: String?
        var installationId: String?
        /// The user counted against the per-user cap.
        var countedUser: String?
        var subs: [Int64: LiveSub] = [:]
        var inbox: [[UInt8]] = []
        var inboxBytes = 0
        var running = false
        var closed = false
        /// The socket closed after `connect`: `disconnect` runs after the messages before it.
        var disconnectPending = false
    }
    let state = Mutex(State())

    init(server: LiveQueryServer, connection: WebSocketConnection, clientId: String, ip: String) {
        self.server = server
        self.connection = connection
        self.clientId = clientId
        self.ip = ip
    }

    // MARK: input (loop thread)

    /// Queues a client message for the workers. A client that floods faster than the workers
    /// answer is dropped once a send queue's worth of messages waits.
    func enqueue(_ message: [UInt8]) {
        let start = state.withLock { s -> Bool? in
            if s.closed { return false }
            if s.inboxBytes + message.count > server.config.sendQueueBytes { return nil }
            s.inbox.append(message)
            s.inboxBytes += message.count
            if s.running { return false }
            s.running = true
            return true
        }
        guard let start else {
            connection.close(code: 1008, reason: "too many messages",
                             last: Self.errorMessage(code: 1, "too many messages waiting: slow down and reconnect",
                                                     reconnect: true))
            return
        }
        if start { schedule() }
    }

    private func schedule() {
        let ok = server.onWorker { [self] in drain() }
        if !ok {
            state.withLock {
                $0.running = false
                $0.inbox = []
                $0.inboxBytes = 0
            }
            connection.close(code: 1013, reason: "server busy",
                             last: Self.errorMessage(code: 1, "server busy: reconnect later", reconnect: true))
        }
    }

    /// Worker: handles queued messages until none is left, then a pending `disconnect`.
    private func drain() {
        while true {
            let next = state.withLock { s -> [UInt8]?? in
                if s.closed {
                    s.inbox = []
                    s.inboxBytes = 0
                    if s.disconnectPending {
                        s.disconnectPending = false
                        return .some(nil)
                    }
                    s.running = false
                    return nil
                }
                if s.inbox.isEmpty {
                    s.running = false
                    return nil
                }
                let m = s.inbox.removeFirst()
                s.inboxBytes -= m.count
                return m
            }
            switch next {
            case .none: return
            case .some(.none): disconnected()
            case .some(.some(let m)): handle(m)
            }
        }
    }

    // MARK: messages (worker)

    private func handle(_ bytes: [UInt8]) {
        let value: JSONValue
        do throws(ParseError) {
            value = try JSON.parse(bytes)
        } catch {
            return sendError(code: 1, error.message)
        }
        guard let msg = value.objectValue else { return sendError(code: 1, "a message must be a JSON object") }
        guard let op = msg["op"]?.stringValue else { return sendError(code: 1, "missing 'op'") }
        switch op {
        case "connect": connect(msg)
        case "subscribe", "update", "unsubscribe":
            guard state.withLock({ $0.connected }) else {
                return sendError(code: 2, "send 'connect' first", requestId: msg["requestId"]?.intValue)
            }
            if op == "unsubscribe" { unsubscribe(msg) } else { subscribe(msg, update: op == "update") }
        default:
            // The name is echoed shortened: a 64 KiB op must not come back 64 KiB long.
            sendError(code: 3, "unknown op '\(op.prefix(40))'", requestId: msg["requestId"]?.intValue)
        }
    }

    private func caller(_ identity: Identity, _ user: JSONObject?) -> CallerContext {
        CallerContext(identity: identity, user: user, requestId: clientId, ip: ip)
    }

    private func account(_ identity: Identity) -> Account {
        Account.caller(userId: identity.userId, ip: ip)
    }

    /// One unit for `op`; nil when allowed, else the 155 refusal (master is never refused).
    private func charge(_ op: String, _ identity: Identity, bytesIn: Int) -> ParseError? {
        let quota = server.services.quota
        let d = quota.check(account: account(identity), function: nil, isMaster: identity.isMaster)
        let refused = d.error != nil
        quota.record(RequestUsage(account: account(identity), target: .api("livequery." + op), refused: refused,
                                  bytesIn: Int64(bytesIn)))
        return d.error
    }

    /// The identity for a session token (the user with their roles) or 209.
    private func resolve(_ token: String) throws(ParseError) -> (Identity, JSONObject) {
        guard let s = try server.services.auth.resolveSession(token) else {
            throw ParseError(.invalidSessionToken, "Invalid session token")
        }
        // With the user's roles, so triggers' reads and the subscription checks honour `role:` ACLs.
        return (try server.services.store.identity(forUser: s.userId), s.user)
    }

    private func connect(_ msg: JSONObject) {
        let s = server.services
        let already = state.withLock { st -> Bool in
            if st.connected || st.connecting { return true }
            st.connecting = true
            return false
        }
        if already { return sendError(code: 1, "already connected") }
        func refuse(_ code: Int, _ message: String) {
            state.withLock { $0.connecting = false }
            connection.close(code: 1008, reason: "connect refused",
                             last: Self.errorMessage(code: code, message, reconnect: false))
        }
        guard let appId = msg["applicationId"]?.stringValue, ConstantTime.equals(appId, s.config.appId) else {
            return refuse(119, "unauthorized: wrong applicationId")
        }
        var identity = Identity.anonymous
        var user: JSONObject?
        var token: String?
        if let mk = msg["masterKey"], !mk.isNull {
            guard let k = mk.stringValue, ConstantTime.equals(k, s.masterKey) else {
                return refuse(119, "unauthorized: wrong masterKey")
            }
            identity = .master
        } else if let t = msg["sessionToken"]?.stringValue, !t.isEmpty {
            do throws(ParseError) {
                (identity, user) = try resolve(t)
                token = t
            } catch {
                return refuse(error.code.rawValue, error.message)
            }
        }
        let installationId = msg["installationId"]?.stringValue
        if let e = charge("connect", identity, bytesIn: 0) {
            state.withLock { $0.connecting = false }
            return sendError(code: e.code.rawValue, e.message)
        }
        do throws(ParseError) {
            var fields: [(String, JSONValue)] = [("clientId", .string(clientId))]
            if let installationId { fields.append(("installationId", .string(installationId))) }
            _ = try s.cloud.runLiveTrigger(.beforeConnect, fields: fields, caller: caller(identity, user))
        } catch {
            return refuse(error.code.rawValue, error.message)
        }
        if let uid = identity.userId {
            guard server.reserveUser(uid) else {
                return refuse(155, "too many realtime connections for this user (limit \(server.config.maxConnectionsPerUser))")
            }
        }
        let closed = state.withLock { st -> Bool in
            st.connecting = false
            if st.closed { return true }
            st.connected = true
            st.identity = identity
            st.user = user
            st.sessionToken = token
            st.installationId = installationId
            st.countedUser = identity.userId
            return false
        }
        if closed {
            if let uid = identity.userId { server.releaseUser(uid) }
            return
        }
        send(["op": "connected", "clientId": .string(clientId)])
        fireEvent("connect", identity: identity, user: user, extra: [])
    }

    private func subscribe(_ msg: JSONObject, update: Bool) {
        guard let rid = msg["requestId"]?.intValue else { return sendError(code: 1, "missing or invalid 'requestId'") }
        guard let q = msg["query"]?.objectValue else { return sendError(code: 1, "missing 'query'", requestId: rid) }
        guard let className = q["className"]?.stringValue, !className.isEmpty else {
            return sendError(code: 1, "missing 'query.className'", requestId: rid)
        }
        var since: Int64?
        if let sv = msg["since"], !sv.isNull {
            guard let n = sv.intValue, n >= 0 else { return sendError(code: 1, "'since' must be a sequence number", requestId: rid) }
            since = n
        }
        let (connIdentity, connUser, connToken, installationId, existing, subCount) = state.withLock { st in
            (st.identity, st.user, st.sessionToken, st.installationId, st.subs[rid], st.subs.count)
        }
        if update && existing == nil { return sendError(code: 1, "no subscription with requestId \(rid)", requestId: rid) }
        if !update && existing != nil { return sendError(code: 1, "requestId \(rid) is already subscribed", requestId: rid) }
        if !update && subCount >= server.config.maxSubscriptionsPerConnection {
            return sendError(code: 155, "too many subscriptions on this connection (limit \(server.config.maxSubscriptionsPerConnection))",
                             requestId: rid)
        }
        // A subscription may carry its own session token (Parse's per-subscription tokens).
        var identity = connIdentity
        var user = connUser
        var token = connToken
        if !identity.isMaster, let t = msg["sessionToken"]?.stringValue, !t.isEmpty, t != connToken {
            do throws(ParseError) {
                (identity, user) = try resolve(t)
                token = t
            } catch {
                return sendError(code: error.code.rawValue, error.message, requestId: rid)
            }
        }
        if let e = charge(update ? "update" : "subscribe", identity, bytesIn: 0) {
            return sendError(code: e.code.rawValue, e.message, requestId: rid)
        }
        var query = q
        do throws(ParseError) {
            var fields: [(String, JSONValue)] = [("clientId", .string(clientId)), ("requestId", .int(rid)),
                                                 ("query", .object(q))]
            if let installationId { fields.append(("installationId", .string(installationId))) }
            if let edited = try server.services.cloud.runLiveTrigger(.beforeSubscribe, className: className, fields: fields,
                                                                     caller: caller(identity, user))?.objectValue {
                query = edited
            }
        } catch {
            return sendError(code: error.code.rawValue, error.message, requestId: rid)
        }
        let spec: LiveSubscription
        do throws(ParseError) {
            spec = try Self.subscription(query, className: className, since: since)
        } catch {
            return sendError(code: error.code.rawValue, error.message, requestId: rid)
        }
        let sub = LiveSub(client: self, requestId: rid, className: spec.className, account: account(identity))
        if let engine = server.engine {
            do throws(ParseError) {
                let id = try engine.subscribe(spec, viewer: LiveViewer(identity: identity, sessionToken: token), target: sub)
                sub.engineId.store(id, ordering: .releasing)
            } catch {
                return sendError(code: error.code.rawValue, error.message, requestId: rid)
            }
        }
        let (old, closed) = state.withLock { st -> (LiveSub?, Bool) in
            if st.closed { return (nil, true) }
            let o = st.subs[rid]
            st.subs[rid] = sub
            return (o, false)
        }
        if closed {
            sub.cancel(server.engine)
            return
        }
        old?.cancel(server.engine)
        sub.ready(["op": "subscribed", "clientId": .string(clientId), "requestId": .int(rid)])
        if !update {
            fireEvent("subscribe", identity: identity, user: user,
                      extra: [("className", .string(spec.className)), ("requestId", .int(rid))])
        }
    }

    private func unsubscribe(_ msg: JSONObject) {
        guard let rid = msg["requestId"]?.intValue else { return sendError(code: 1, "missing or invalid 'requestId'") }
        let (sub, identity, user) = state.withLock { st in (st.subs.removeValue(forKey: rid), st.identity, st.user) }
        guard let sub else { return sendError(code: 1, "no subscription with requestId \(rid)", requestId: rid) }
        sub.cancel(server.engine)
        if let e = charge("unsubscribe", identity, bytesIn: 0) {
            // The subscription is gone either way; the client hears why the op was refused.
            return sendError(code: e.code.rawValue, e.message, requestId: rid)
        }
        send(["op": "unsubscribed", "clientId": .string(clientId), "requestId": .int(rid)])
        fireEvent("unsubscribe", identity: identity, user: user,
                  extra: [("className", .string(sub.className)), ("requestId", .int(rid))])
    }

    /// `query` → the engine's subscription: `where` (object), `keys` (alias `fields`), `watch`.
    static func subscription(_ q: JSONObject, className: String, since: Int64?) throws(ParseError) -> LiveSubscription {
        func bad(_ m: String) -> ParseError { ParseError(ParseErrorCode(1), m) }
        guard let cls = q["className"]?.stringValue, !cls.isEmpty else { throw bad("missing 'query.className'") }
        guard cls == className else { throw bad("beforeSubscribe may not change query.className") }
        var whereClause = JSONObject()
        if let w = q["where"], !w.isNull {
            guard let o = w.objectValue else { throw bad("'query.where' must be an object") }
            whereClause = o
        }
        func names(_ key: String) throws(ParseError) -> [String]? {
            guard let v = q[key], !v.isNull else { return nil }
            if let s = v.stringValue { return s.split(separator: ",").map { String($0) } }
            guard let a = v.arrayValue else { throw bad("'query.\(key)' must be a list of field names") }
            var out: [String] = []
            for e in a {
                guard let s = e.stringValue, !s.isEmpty else { throw bad("'query.\(key)' must be a list of field names") }
                out.append(s)
            }
            return out
        }
        var keys = try names("keys")
        if keys == nil { keys = try names("fields") }
        let watch = try names("watch")
        return LiveSubscription(className: cls, whereClause: whereClause, keys: keys, watch: watch, since: since)
    }

    // MARK: events and errors

    /// Queues a server message. Over the send-queue limit the client is dropped with an
    /// `error` carrying `reconnect: true` (a consumer that fell behind).
    @discardableResult
    func send(_ o: JSONObject) -> Bool {
        sendBytes(JSON.encode(.object(o)))
    }

    @discardableResult
    func sendBytes(_ b: [UInt8]) -> Bool {
        switch connection.send(b) {
        case .queued: return true
        case .closed: return false
        case .overflow:
            connection.close(code: 1008, reason: "send queue full",
                             last: Self.errorMessage(code: 1, "send queue full: the client fell behind; reconnect and resume with since",
                                                     reconnect: true),
                             dropQueued: true)
            return false
        }
    }

    func sendError(code: Int, _ message: String, requestId: Int64? = nil, reconnect: Bool = false) {
        sendBytes(Self.errorMessage(code: code, message, requestId: requestId, reconnect: reconnect, clientId: clientId))
    }

    static func errorMessage(code: Int, _ message: String, requestId: Int64? = nil, reconnect: Bool,
                             clientId: String? = nil) -> [UInt8] {
        var o: JSONObject = ["op": "error", "code": .int(Int64(code)), "error": .string(message),
                             "reconnect": .bool(reconnect)]
        if let clientId { o["clientId"] = .string(clientId) }
        if let requestId { o["requestId"] = .int(requestId) }
        return JSON.encode(.object(o))
    }

    /// The engine ended one subscription (revoked session, lost access to the class, slow).
    func subscriptionEnded(_ sub: LiveSub, _ error: ParseError, reconnect: Bool) {
        let removed = state.withLock { st -> Bool in
            guard st.subs[sub.requestId] === sub else { return false }
            st.subs[sub.requestId] = nil
            return true
        }
        guard removed else { return }
        if reconnect {
            connection.close(code: 1008, reason: "send queue full",
                             last: Self.errorMessage(code: error.code.rawValue, error.message, requestId: sub.requestId,
                                                     reconnect: true, clientId: clientId),
                             dropQueued: true)
        } else {
            sendError(code: error.code.rawValue, error.message, requestId: sub.requestId)
        }
    }

    /// `cloud.onLiveQueryEvent` on a worker (already on one, or queued).
    private func fireEvent(_ event: String, identity: Identity, user: JSONObject?, extra: [(String, JSONValue)]) {
        let cloud = server.services.cloud
        guard cloud.hasLiveTrigger(.onLiveQueryEvent) else { return }
        let (inst, subs) = state.withLock { ($0.installationId, $0.subs.count) }
        var fields: [(String, JSONValue)] = [("event", .string(event)), ("clientId", .string(clientId)),
                                             ("subscriptions", .int(Int64(subs))),
                                             ("clients", .int(Int64(server.connectionCount)))]
        if let inst { fields.append(("installationId", .string(inst))) }
        fields.append(contentsOf: extra)
        do throws(ParseError) {
            _ = try cloud.runLiveTrigger(.onLiveQueryEvent, fields: fields, caller: caller(identity, user))
        } catch {
            Log.warn("onLiveQueryEvent \(event) (client \(clientId)) failed: \(error.message)")
        }
    }

    /// The socket is gone: drop subscriptions, release the user slot, and queue `disconnect`
    /// behind the messages already being handled (presence sees the events in order).
    func connectionClosed() {
        let hasTrigger = server.services.cloud.hasLiveTrigger(.onLiveQueryEvent)
        let (subs, counted, start) = state.withLock { st in
            st.closed = true
            let r = (Array(st.subs.values), st.countedUser)
            st.subs = [:]
            st.countedUser = nil
            st.disconnectPending = st.connected && hasTrigger
            let start = st.disconnectPending && !st.running
            if start { st.running = true }
            return (r.0, r.1, start)
        }
        for s in subs { s.cancel(server.engine) }
        if let counted { server.releaseUser(counted) }
        if start && !server.onWorker({ [self] in drain() }) {
            Log.warn("onLiveQueryEvent disconnect (client \(clientId)) dropped: worker queue full")
        }
    }

    private func disconnected() {
        let (identity, user) = state.withLock { st in
            st.connected = false
            return (st.identity, st.user)
        }
        fireEvent("disconnect", identity: identity, user: user, extra: [])
    }
}

/// One live subscription of a client: receives the engine's events for it. Events that arrive
/// before its `subscribed` message went out wait (the replay of `since` starts at once).
final class LiveSub: LiveQueryEventTarget, Sendable {
    /// Strong: the engine may still be delivering to this subscription when its socket closes;
    /// the cycle with the client's table ends when the subscription leaves it.
    let client: LiveClient
    let requestId: Int64
    let className: String
    /// Delivered events cost no unit; they are counted (events, bytes) on this account.
    let account: Account
    let engineId = Atomic<UInt64>(0)
    private let held = Mutex<[[UInt8]]?>([])
    /// `"clientId":…,"requestId":…,`: this subscription's part of every event message. Made at
    /// the first event (an idle subscription holds no copy).
    private let ids = Mutex<[UInt8]>([])

    init(client: LiveClient, requestId: Int64, className: String, account: Account) {
        self.client = client
        self.requestId = requestId
        self.className = className
        self.account = account
    }

    /// `{"op":…,"clientId":…,"requestId":…,"object":…,"original":…,"seq":…}`. The part after
    /// the ids is the same for every subscriber of the event and encoded once.
    func message(_ event: LiveQueryEvent) -> [UInt8] {
        let tail = event.encoding.get {
            var t = [UInt8]()
            t.append(contentsOf: #""object":"#.utf8)
            t += JSON.encode(.object(event.object))
            if let orig = event.original {
                t.append(contentsOf: #","original":"#.utf8)
                t += JSON.encode(.object(orig))
            }
            t.append(contentsOf: #","seq":"#.utf8)
            t += JSON.encode(.int(event.seq))
            t.append(UInt8(ascii: "}"))
            return t
        }
        let ids = self.ids.withLock { ids in
            if ids.isEmpty {
                ids.append(contentsOf: #""clientId":"#.utf8)
                ids += JSON.encode(.string(client.clientId))
                ids.append(contentsOf: #","requestId":"#.utf8)
                ids += JSON.encode(.int(requestId))
                ids.append(UInt8(ascii: ","))
            }
            return ids
        }
        // The op is one of the event kinds' names (plain ASCII, nothing to escape).
        var b = [UInt8]()
        b.reserveCapacity(10 + event.op.utf8.count + ids.count + tail.count)
        b.append(contentsOf: #"{"op":""#.utf8)
        b.append(contentsOf: event.op.utf8)
        b.append(contentsOf: #"","#.utf8)
        b += ids
        b += tail
        return b
    }

    /// Sends `subscribed`, then the events held meanwhile.
    func ready(_ subscribed: JSONObject) {
        held.withLock { h in
            client.send(subscribed)
            for e in h ?? [] { client.sendBytes(e) }
            h = nil
        }
    }

    func cancel(_ engine: (any LiveQueryEngine)?) {
        let id = engineId.exchange(0, ordering: .acquiringAndReleasing)
        if id != 0 { engine?.unsubscribe(id) }
    }

    func deliver(_ event: LiveQueryEvent) -> Bool {
        let bytes = message(event)
        let ok = held.withLock { h in
            if h != nil {
                h!.append(bytes)
                return true
            }
            return client.sendBytes(bytes)
        }
        if ok {
            client.server.services.quota.recordEvent(account: account, bytes: Int64(bytes.count))
            client.server.bytesOut.add(bytes.count, ordering: .relaxed)
        }
        return ok
    }

    func terminated(_ error: ParseError, reconnect: Bool) {
        client.subscriptionEnded(self, error, reconnect: reconnect)
    }
}
