import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The subscription engine shared by every realtime transport.
///
/// The store publishes each committed transaction's changes (`ChangeListener`); `publish` only
/// appends them to a bounded queue, so a commit is never slowed by delivery. One delivery
/// thread of the hub's own (never an HTTP I/O thread) matches each change against the
/// subscriptions of its class (indexed by class and by one top-level equality of each where),
/// applies the visibility rule (running `afterFind` as the subscriber), chooses the event
/// (create/enter/update/leave/delete, `watch`) and hands it to the subscription's sink.
///
/// A subscription with `since` is registered at once but goes live only after its replay, which
/// runs on the delivery thread up to the last change that thread handled: no gap, no duplicate.
/// If the queue overflows, every subscription is ended with `reconnect: true` (clients resume
/// from their last seq).
public final class ChangeHub: ChangeListener, @unchecked Sendable {
    // @unchecked: `registry` and `queue` are only touched under their mutexes; the rest is
    // immutable or atomic.
    public let store: any Store
    public let visibility: Visibility
    /// Changes queued for delivery above this → overflow (see the type's note).
    public let maxQueuedChanges: Int

    /// Counters for `/metrics` and usage.
    public let eventsDelivered = Atomic<Int>(0)
    public let slowConsumersDropped = Atomic<Int>(0)
    public let subscriptionCount = Atomic<Int>(0)

    /// A subscription's record. A class: delivery hands out references, not copies of the
    /// record per event (copying it retained and released each of its fields every time).
    final class Sub: Sendable {
        let id: SubscriptionID
        let spec: SubscriptionSpec
        let matcher: LiveMatcher
        let viewer: Viewer
        let sink: any EventSink
        /// Receives live events (false until its replay of `since` is done).
        let live: Atomic<Bool>
        /// Cleared when it leaves the registry (an earlier delivery may have ended it).
        let registered = Atomic<Bool>(true)
        /// Field the registry indexes this subscription under (nil: class-wide list).
        let indexField: String?
        let indexKey: String?
        /// Hash of class, where, keys and watch: subscriptions equal in those and in their viewer
        /// receive the same event (see `deliver`; equal hashes are confirmed by `sameShape`).
        let shape: Int

        init(id: SubscriptionID, spec: SubscriptionSpec, matcher: LiveMatcher, viewer: Viewer, sink: any EventSink,
             live: Bool, indexField: String?, indexKey: String?) {
            self.id = id
            self.spec = spec
            self.matcher = matcher
            self.viewer = viewer
            self.sink = sink
            self.live = Atomic(live)
            self.indexField = indexField
            self.indexKey = indexKey
            var h = Hasher()
            h.combine(spec.className)
            h.combine(spec.whereClause)
            h.combine(spec.keys)
            h.combine(spec.watch)
            self.shape = h.finalize()
        }

        /// Whether `other` gets the same events as this one for the same viewer.
        func sameShape(_ other: Sub) -> Bool {
            other === self || (shape == other.shape && spec.className == other.spec.className
                && spec.whereClause == other.spec.whereClause && spec.keys == other.spec.keys
                && spec.watch == other.spec.watch)
        }
    }

    /// One event choice shared by subscriptions of one shape and one viewer.
    struct ChoiceKey: Hashable {
        let shape: Int
        let viewer: Viewer
    }

    struct Registry {
        var subs: [SubscriptionID: Sub] = [:]
        /// className → subscriptions without an indexed equality.
        var byClass: [String: Set<SubscriptionID>] = [:]
        /// className → field → value key → subscriptions.
        var byValue: [String: [String: [String: Set<SubscriptionID>]]] = [:]
        var classCount: [String: Int] = [:]
    }

    enum Job {
        case changes([ChangeEvent])
        case replay(SubscriptionID)
    }

    private let registry = Mutex(Registry())
    private let nextId = Atomic<UInt64>(1)
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var jobs: [Job] = []
    private var queued = 0
    private var overflowSeq: Int64 = 0
    private var stopping = false
    /// The delivery thread is working on a batch (guarded by `mutex`).
    private var delivering = false
    /// The last seq the delivery thread handled (only that thread writes it, or `publish` while
    /// that thread is idle with nothing queued, under `mutex`).
    private let handled = Atomic<Int64>(0)

    /// Creates the hub, reads the feed's head and starts the delivery thread. Install it with
    /// `store.setChangeListener(hub)`.
    public init(store: any Store, visibility: Visibility, maxQueuedChanges: Int = 100_000) throws(ParseError) {
        self.store = store
        self.visibility = visibility
        self.maxQueuedChanges = maxQueuedChanges
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(cond, nil)
        handled.store(try store.changeFeedHead(), ordering: .releasing)
        let hub = self
        guard spawnThread({ hub.run() }) else {
            throw ParseError.internalError("cannot start the realtime delivery thread")
        }
    }

    /// Stops the delivery thread (pending changes are dropped).
    public func stop() {
        pthread_mutex_lock(mutex)
        stopping = true
        pthread_cond_signal(cond)
        pthread_mutex_unlock(mutex)
    }

    // MARK: subscriptions

    /// Registers a subscription. Validates the where (102 and the REST compiler's errors;
    /// unsupported operators refused), class permission `find` and protected fields (119),
    /// and `since` (160 when older than the purge horizon). Events go to `sink`.
    public func subscribe(_ spec: SubscriptionSpec, viewer: Viewer, sink: any EventSink) throws(ParseError) -> SubscriptionID {
        var viewer = viewer
        viewer.roles = visibility.host.roleNames(of: viewer.identity)
        try SchemaCatalog.validateClassName(spec.className)
        try visibility.check(spec, viewer)
        let matcher = try LiveMatcher(className: spec.className, where: spec.whereClause,
                                      schema: store.schema(spec.className).map(Self.querySchema))
        if let since = spec.since {
            guard since >= 0 else { throw ParseError(.invalidQuery, "since must be a non-negative sequence number") }
            try store.checkChangeFeed(since: since)
        }
        let id = nextId.add(1, ordering: .relaxed).oldValue
        let eq = matcher.equalities.first
        let sub = Sub(id: id, spec: spec, matcher: matcher, viewer: viewer, sink: sink, live: spec.since == nil,
                      indexField: eq?.field, indexKey: eq?.key)
        registry.withLock { r in
            r.subs[id] = sub
            r.classCount[spec.className, default: 0] += 1
            if let f = sub.indexField, let k = sub.indexKey {
                r.byValue[spec.className, default: [:]][f, default: [:]][k, default: []].insert(id)
            } else {
                r.byClass[spec.className, default: []].insert(id)
            }
        }
        subscriptionCount.add(1, ordering: .relaxed)
        if spec.since != nil { enqueue(.replay(id), weight: 1) }
        return id
    }

    /// The viewer for a session token (roles resolved). - Throws: 209 for an invalid token.
    public func viewer(sessionToken: String) throws(ParseError) -> Viewer {
        var v = try visibility.host.viewer(sessionToken: sessionToken)
        v.roles = visibility.host.roleNames(of: v.identity)
        return v
    }

    /// Removes a subscription (no-op when already gone).
    public func unsubscribe(_ id: SubscriptionID) {
        let removed = registry.withLock { r -> Bool in
            guard let sub = r.subs.removeValue(forKey: id) else { return false }
            sub.registered.store(false, ordering: .releasing)
            let c = sub.spec.className
            r.classCount[c, default: 1] -= 1
            if r.classCount[c] == 0 { r.classCount[c] = nil }
            if let f = sub.indexField, let k = sub.indexKey {
                r.byValue[c]?[f]?[k]?.remove(id)
                if r.byValue[c]?[f]?[k]?.isEmpty == true { r.byValue[c]?[f]?[k] = nil }
            } else {
                r.byClass[c]?.remove(id)
            }
            return true
        }
        if removed { subscriptionCount.subtract(1, ordering: .relaxed) }
    }

    /// Ends a subscription on the hub's side and tells its sink.
    func terminate(_ id: SubscriptionID, _ error: ParseError, reconnect: Bool) {
        guard let sink = registry.withLock({ $0.subs[id]?.sink }) else { return }
        unsubscribe(id)
        sink.terminate(subscription: id, error: error, reconnect: reconnect)
    }

    // MARK: ChangeListener

    public func observes(_ className: String) -> Bool {
        registry.withLock { $0.classCount[className] != nil }
    }

    public func publish(_ events: [ChangeEvent]) {
        let lastSeq = events.last?.seq ?? 0
        // A commit to classes nobody subscribes to brings only marks, which merely advance
        // `handled`. With nothing queued and the delivery thread idle, advance it here as that
        // thread would at once: waking it for each such write cost every write a context switch
        // or two.
        if !events.contains(where: { !$0.isMark || observes($0.className) }) {
            pthread_mutex_lock(mutex)
            if jobs.isEmpty && !delivering && overflowSeq == 0 && !stopping {
                handled.store(max(handled.load(ordering: .relaxed), lastSeq), ordering: .releasing)
                pthread_mutex_unlock(mutex)
                return
            }
            pthread_mutex_unlock(mutex)
        }
        enqueue(.changes(events), weight: events.count, lastSeq: lastSeq)
    }

    private func enqueue(_ job: Job, weight: Int, lastSeq: Int64 = 0) {
        pthread_mutex_lock(mutex)
        if queued + weight > maxQueuedChanges, case .changes = job {
            overflowSeq = max(overflowSeq, lastSeq)
        } else {
            jobs.append(job)
            queued += weight
        }
        pthread_cond_signal(cond)
        pthread_mutex_unlock(mutex)
    }

    // MARK: delivery thread

    private func run() {
        // afterFind runs here: the Lua watchdog interrupts scripts with SIGURG, so make sure this
        // thread takes it whatever mask it inherited.
        var urg = sigset_t()
        sigemptyset(&urg)
        sigaddset(&urg, SIGURG)
        pthread_sigmask(SIG_UNBLOCK, &urg, nil)
        while true {
            pthread_mutex_lock(mutex)
            delivering = false
            while jobs.isEmpty && overflowSeq == 0 && !stopping { pthread_cond_wait(cond, mutex) }
            if stopping { pthread_mutex_unlock(mutex); return }
            delivering = true
            let batch = jobs
            jobs = []
            queued = 0
            let overflow = overflowSeq
            overflowSeq = 0
            pthread_mutex_unlock(mutex)
            for job in batch {
                switch job {
                case .changes(let events):
                    for e in events { deliver(e) }
                    if let last = events.last { handled.store(max(handled.load(ordering: .relaxed), last.seq), ordering: .releasing) }
                case .replay(let id): replay(id)
                }
            }
            if overflow > 0 {
                // Changes were dropped: everyone resumes from the feed.
                handled.store(max(handled.load(ordering: .relaxed), overflow), ordering: .releasing)
                let ids = registry.withLock { Array($0.subs.keys) }
                for id in ids {
                    terminate(id, ParseError(.internalError, "server too busy: resume with your last seq"), reconnect: true)
                }
            }
        }
    }

    /// Subscriptions that may care about `e`: the class-wide list plus, for each indexed
    /// field, those whose value equals the object's value before or after.
    private func candidates(_ e: ChangeEvent) -> [Sub] {
        registry.withLock { r -> [Sub] in
            guard r.classCount[e.className] != nil else { return [] }
            var ids = r.byClass[e.className] ?? []
            if let fields = r.byValue[e.className] {
                for (f, byKey) in fields {
                    for o in [e.current, e.original] {
                        guard let o, let k = LiveMatcher.valueKey(o[f]), let s = byKey[k] else { continue }
                        ids.formUnion(s)
                    }
                }
            }
            return ids.sorted().compactMap { r.subs[$0] }
        }
    }

    private func deliver(_ e: ChangeEvent) {
        if e.isMark {
            deliverMark(e)
            return
        }
        let subs = candidates(e)
        guard !subs.isEmpty else { return }
        var e = e
        if !e.hasPayload {
            // Written before anyone observed the class: only the current state is known.
            guard e.op == .save, let o = try? store.fetchRaw(e.className, objectId: e.objectId) else { return }
            e.current = try? o.json(for: .master)
        }
        // Subscriptions of one shape seen by one viewer get the same event: it is chosen,
        // redacted and (by the transport, through `LiveEvent.encoding`) encoded once for all of
        // them. Not when the class has an afterFind trigger: that runs once per subscriber.
        let share = !visibility.host.hasAfterFind(e.className)
        var chosen: [ChoiceKey: (by: Sub, event: LiveEvent?)] = [:]
        for sub in subs where sub.live.load(ordering: .acquiring) {
            // An earlier delivery may have ended it (its sink was too slow).
            guard sub.registered.load(ordering: .acquiring), let viewer = currentViewer(sub) else { continue }
            let ev: LiveEvent?
            if share {
                let key = ChoiceKey(shape: sub.shape, viewer: viewer)
                if let c = chosen[key], c.by.sameShape(sub) {
                    ev = c.event
                } else {
                    ev = choose(e, sub, viewer)
                    chosen[key] = (sub, ev)
                }
            } else {
                ev = choose(e, sub, viewer)
            }
            if let ev { send(ev, sub) }
        }
    }

    /// The viewer with fresh roles, or nil (and the subscription ended with 209) when its
    /// session is no longer valid.
    private func currentViewer(_ sub: Sub) -> Viewer? {
        let host = visibility.host
        guard host.isCurrent(sub.viewer) else {
            terminate(sub.id, ParseError(.invalidSessionToken, "Invalid session token"), reconnect: false)
            return nil
        }
        var v = sub.viewer
        if v.identity.userId != nil { v.roles = host.roleNames(of: v.identity) }
        return v
    }

    /// Parse's event choice on the object before and after, each tested for "matches the
    /// where and the viewer may read it".
    func choose(_ e: ChangeEvent, _ sub: Sub, _ viewer: Viewer) -> LiveEvent? {
        let vis = visibility
        let cls = e.className
        guard vis.mayFind(cls, viewer) else { return nil }
        func visible(_ o: JSONObject?) -> Bool {
            guard let o else { return false }
            return vis.canRead(o, className: cls, viewer) && sub.matcher.matches(o)
        }
        let before = visible(e.original), after = e.op == .save && visible(e.current)
        let keys = sub.spec.keys
        func view(_ o: JSONObject) -> JSONObject { vis.redact(o, className: cls, viewer: viewer, keys: keys) }
        var kind: LiveEventKind
        var object: JSONObject
        var original: JSONObject?
        switch (e.op, before, after) {
        case (.delete, true, _):
            kind = .delete; object = view(e.original!)
        case (.save, true, true):
            if let w = sub.spec.watch, !w.contains(where: { e.original![$0] != e.current![$0] }) { return nil }
            kind = .update; object = view(e.current!); original = view(e.original!)
        case (.save, true, false):
            kind = .leave
            original = view(e.original!)
            // Lost access: the last state it could read, never the values of this change.
            object = e.current.flatMap { vis.canRead($0, className: cls, viewer) ? view($0) : nil } ?? original!
        case (.save, false, true):
            if let w = sub.spec.watch, e.original == nil, !w.contains(where: { e.current![$0] != nil }) { return nil }
            if let w = sub.spec.watch, let o = e.original, !w.contains(where: { o[$0] != e.current![$0] }) { return nil }
            kind = e.original == nil ? .create : .enter
            object = view(e.current!)
            original = e.original.flatMap { vis.canRead($0, className: cls, viewer) ? view($0) : nil }
        default:
            return nil
        }
        // afterFind runs as the viewer; an object it drops is not delivered.
        guard let shown = vis.afterFind(cls, [object], viewer: viewer).first else { return nil }
        if let o = original { original = vis.afterFind(cls, [o], viewer: viewer).first }
        return LiveEvent(kind: kind, seq: e.seq, className: cls, object: shown,
                         original: kind == .create || kind == .delete ? nil : original)
    }

    private func send(_ ev: LiveEvent, _ sub: Sub) {
        if sub.sink.deliver(ev, subscription: sub.id) {
            eventsDelivered.add(1, ordering: .relaxed)
            return
        }
        // A slow consumer: every subscription of its sink ends, the client resumes from its seq.
        slowConsumersDropped.add(1, ordering: .relaxed)
        let ids = registry.withLock { r in r.subs.values.filter { $0.sink === sub.sink }.map(\.id) }
        for id in ids {
            terminate(id, ParseError(.internalError, "client too slow: resume with your last seq"), reconnect: true)
        }
    }

    // MARK: replay and the change feed

    /// Writes made while nobody observed the class (a subscription may have arrived since,
    /// before they committed): live subscriptions get those rows from the feed, as a replay.
    private func deliverMark(_ e: ChangeEvent) {
        let subs = registry.withLock { r in (r.byClass[e.className] ?? []).union(
            (r.byValue[e.className] ?? [:]).values.flatMap { $0.values.flatMap { $0 } }).sorted().compactMap { r.subs[$0] } }
        for sub in subs where sub.live.load(ordering: .acquiring) {
            replayRange(sub, after: e.firstSeq - 1, through: e.seq)
        }
    }

    /// Replays the feed after `since` up to the last handled change, then marks it live.
    private func replay(_ id: SubscriptionID) {
        guard let sub = registry.withLock({ $0.subs[id] }), let since = sub.spec.since else { return }
        replayRange(sub, after: since, through: handled.load(ordering: .acquiring))
        sub.live.store(true, ordering: .releasing)
    }

    /// Sends `sub` the feed rows in `(after, through]` it may see, each object once, latest state.
    private func replayRange(_ sub: Sub, after start: Int64, through: Int64) {
        let id = sub.id
        var after = start
        while after < through {
            guard let viewer = currentViewer(sub) else { return }
            let page: FeedPage
            do throws(ParseError) {
                page = try self.page(sub.spec.className, after: after, through: through, limit: 500,
                                     matcher: sub.matcher, keys: sub.spec.keys, viewer: viewer)
            } catch {
                terminate(id, error, reconnect: true)
                return
            }
            for item in page.items {
                guard sub.registered.load(ordering: .acquiring) else { return }
                let ev: LiveEvent
                if let o = item.object {
                    let kind: LiveEventKind = o["createdAt"] == o["updatedAt"] ? .create : .update
                    ev = LiveEvent(kind: kind, seq: item.seq, className: sub.spec.className, object: o)
                } else {
                    ev = LiveEvent(kind: .delete, seq: item.seq, className: sub.spec.className,
                                   object: ["objectId": .string(item.objectId), "className": .string(sub.spec.className)])
                }
                send(ev, sub)
            }
            if page.next <= after { break }
            after = page.next
        }
    }

    /// One change-feed row as a viewer sees it.
    public struct FeedItem: Sendable {
        public var seq: Int64
        public var op: ChangeEvent.Op
        public var objectId: String
        /// The object as a REST get by the viewer returns it (saves), plus `className`.
        public var object: JSONObject?
    }

    /// A page of the feed and where the next one starts.
    public struct FeedPage: Sendable {
        public var items: [FeedItem]
        /// Pass as the next `since` (the last seq examined).
        public var next: Int64
    }

    /// Reads the feed of `className` after `since` as `viewer` sees it: saves of objects it
    /// may read that match the where (latest state), tombstones of objects it could read.
    /// Scans at most a few pages of raw rows; `next` says where it stopped.
    /// - Throws: 119 without class permission `find`, 160 when `since` is too old.
    public func changes(_ className: String, since: Int64, limit: Int, where w: JSONValue?, keys: [String]?,
                        viewer: Viewer) throws(ParseError) -> FeedPage {
        var viewer = viewer
        viewer.roles = visibility.host.roleNames(of: viewer.identity)
        let spec = SubscriptionSpec(className: className, whereClause: w, keys: keys)
        try SchemaCatalog.validateClassName(className)
        try visibility.check(spec, viewer)
        guard since >= 0 else { throw ParseError(.invalidQuery, "since must be a non-negative sequence number") }
        let matcher = try LiveMatcher(className: className, where: w,
                                      schema: store.schema(className).map(Self.querySchema))
        try store.checkChangeFeed(since: since)
        let head = try store.changeFeedHead()
        return try page(className, after: since, through: head, limit: limit, matcher: matcher, keys: keys, viewer: viewer)
    }

    func page(_ className: String, after: Int64, through: Int64, limit: Int, matcher: LiveMatcher,
              keys: [String]?, viewer: Viewer) throws(ParseError) -> FeedPage {
        var items: [FeedItem] = []
        var cursor = after
        var scans = 0
        while items.count < limit, cursor < through, scans < 8 {
            scans += 1
            let rows = try store.changeFeed(className, after: cursor, through: through, limit: max(limit, 100))
            if rows.isEmpty { cursor = through; break }
            var batch: [FeedItem] = []
            var objects: [JSONObject] = []
            for row in rows {
                cursor = row.seq
                if row.op == .delete {
                    if visibility.admits(perm: row.perm, viewer) {
                        batch.append(FeedItem(seq: row.seq, op: .delete, objectId: row.objectId, object: nil))
                    }
                } else if let stored = row.object, let o = try? stored.json(for: .master),
                          visibility.canRead(o, className: className, viewer), matcher.matches(o) {
                    batch.append(FeedItem(seq: row.seq, op: .save, objectId: row.objectId, object: nil))
                    objects.append(visibility.redact(o, className: className, viewer: viewer, keys: keys))
                }
                if items.count + batch.count >= limit { break }
            }
            // afterFind once per page, as REST find runs it once per answer.
            let shown = visibility.afterFind(className, objects, viewer: viewer)
            var byId: [String: JSONObject] = [:]
            for o in shown { if let id = o["objectId"]?.stringValue { byId[id] = o } }
            for var item in batch {
                if item.op == .save {
                    guard let o = byId[item.objectId] else { continue }
                    item.object = o
                }
                items.append(item)
            }
        }
        return FeedPage(items: items, next: max(cursor, after))
    }

    static func querySchema(_ s: ClassSchema) -> QuerySchema {
        QuerySchema(className: s.className, fields: s.fields)
    }

    /// The last seq handled by the delivery thread.
    public var handledSeq: Int64 { handled.load(ordering: .acquiring) }
}
