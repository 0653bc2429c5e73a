import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Realtime across hosts: every host's listener hears every host's committed changes, in seq
/// order, each once.
///
/// Announcing: after its commits, a host sends its highest committed seq on `mb_changes`, at
/// most once per `PGFanout.announceIntervalMillis` whatever the write rate (a NOTIFY takes a
/// database-wide lock at commit, so one per write would serialise every commit).
///
/// Following: this host's own commits reach the listener directly when they are the next seqs
/// it expects (one host alone never reads the feed back). When a seq is missing before them
/// (another host's commit, or a transaction that rolled back after numbering), or another host
/// announces a higher seq, or the listening connection came back after a loss, the fan-out
/// thread reads the feed after the last seq delivered, in one snapshot, and delivers those rows
/// merged with this host's waiting commits (which keep their in-memory events). Seqs are
/// assigned in commit order (`PostgresStore+ChangeFeed.swift`), so once seq N is visible every
/// seq below it is settled: a gap the snapshot shows is a rollback, never a late row.
///
/// A row read from the feed becomes the event this host would have made: `prev` is the object
/// before the write; the object after it is the next row's `prev` for the same object, or the
/// class's row in that same snapshot for the latest write. Classes this host's listener does
/// not observe become marks (the listener reads those rows itself if it needs them).
extension PostgresStore {
    /// Rows read per feed query while catching up.
    static let fanoutPage = 500

    /// Reads the committed feed rows after `after` (one snapshot) as events for `listener`,
    /// leaving out the seqs in `skip` (this host's commits waiting with their own events).
    func readFeed(after: Int64, skip: [ClosedRange<Int64>], listener: any ChangeListener) throws(ParseError) -> PGFeedRead {
        try pool.transaction(isolation: .repeatableRead) { (tx) throws(ParseError) -> PGFeedRead in
            let c = tx.connection
            let r = try c.execute("""
                SELECT c.seq, c.cls, c.oid, c.op, c.prev, nx.prev, nx.seq IS NOT NULL FROM _mb_changes c
                LEFT JOIN LATERAL (SELECT n.seq, n.prev FROM _mb_changes n
                                   WHERE n.cls = c.cls AND n.oid = c.oid AND n.seq > c.seq ORDER BY n.seq LIMIT 1) nx ON true
                WHERE c.seq > $1 ORDER BY c.seq LIMIT $2
                """, [.integer(after), .integer(Int64(Self.fanoutPage))])
            var read = PGFeedRead(events: [], maxSeq: after, full: r.rows.count == Self.fanoutPage)
            var latest: [String: [String: Int]] = [:]  // class → objectId → event index needing the table row
            for row in r.rows {
                guard let seq = row[0].int64, let cls = row[1].string, let oid = row[2].string else { continue }
                read.maxSeq = max(read.maxSeq, seq)
                if skip.contains(where: { $0.contains(seq) }) { continue }
                let op: ChangeEvent.Op = row[3].string == "delete" ? .delete : .save
                guard listener.observes(cls) else {
                    ChangeEvent.appendMark(&read.events, className: cls, seq: seq, op: op)
                    continue
                }
                var current: JSONObject?
                if op == .save {
                    if row[6] == .bool(true) { current = try Self.feedObject(row[5]) } else { latest[cls, default: [:]][oid] = read.events.count }
                }
                read.events.append(ChangeEvent(seq: seq, className: cls, objectId: oid, op: op,
                                               original: try Self.feedObject(row[4]), current: current))
            }
            for (cls, byId) in latest {
                guard try c.execute("SELECT to_regclass($1) IS NOT NULL", [.text(Naming.table(cls))]).scalar == .bool(true) else { continue }
                let ids = JSONValue.array(byId.keys.map { .string($0) }).jsonBytes
                let rows = try c.execute("""
                    SELECT \(Self.objectColumns) FROM \(Naming.table(cls))
                    WHERE objectId IN (SELECT jsonb_array_elements_text($1::jsonb))
                    """, [.json(ids)]).rows
                for row in rows {
                    let o = StoredObject(className: cls, pgRow: row)
                    if let i = byId[o.objectId] { read.events[i].current = try o.json(for: .master) }
                }
            }
            // A save whose object is gone from the snapshot cannot be shown (its class was dropped).
            read.events.removeAll { !$0.isMark && $0.op == .save && $0.current == nil }
            return read
        }
    }

    static func feedObject(_ v: PGValue) throws(ParseError) -> JSONObject? {
        guard case .json(let bytes) = v else { return nil }
        return try JSON.parse(bytes).objectValue
    }

    /// Sends this host's highest committed seq to every host (autocommit: delivered at once).
    func announce(_ seq: Int64) throws(ParseError) {
        try pool.withConnection { (c) throws(ParseError) in
            try c.execute("SELECT pg_notify($1, $2)", [.text(PGClusterWatch.changesChannel), .text(String(seq))])
        }
    }

    /// The shortest time between two announcements of this host's head.
    public static var announceIntervalMillis: Int64 { PGFanout.announceIntervalMillis }
    /// How many head announcements this host sent (one per interval at most, not per write).
    public var fanoutAnnouncements: Int { fanout.announcements }
    /// The server process of this host's listening connection (0 when none).
    public var listenerBackendPID: Int32 { watch.backendPID }
}

/// One committed transaction of this host: its seqs and the events its listener gets.
struct PGLocalBatch: Sendable {
    var first: Int64
    var last: Int64
    var events: [ChangeEvent]
}

/// What one feed read found.
struct PGFeedRead {
    var events: [ChangeEvent]
    /// The highest seq in the snapshot's page (skipped ones included), or `after` when empty.
    var maxSeq: Int64
    /// The page was full: more rows follow.
    var full: Bool
}

/// The fan-out state and its thread (see the extension above).
final class PGFanout: @unchecked Sendable {
    // @unchecked: `state` is only touched under `mutex`; the thread is started once.
    static let announceIntervalMillis: Int64 = 5

    struct State {
        var following = false
        var started = false
        var stopping = false
        /// The highest seq handed to the listener.
        var delivered: Int64 = 0
        /// This host's commits that wait for earlier seqs, in seq order.
        var pending: [PGLocalBatch] = []
        var needRead = false
        var localHead: Int64 = 0
        var announced: Int64 = 0
        var lastAnnounce: Int64 = 0
        var lastPoll: Int64 = 0
        var watching = false
    }

    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var state = State()
    private let announceCount = Atomic<Int>(0)

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(cond, nil)
    }

    var announcements: Int { announceCount.load(ordering: .acquiring) }

    private func locked<T>(_ body: (inout State) -> T) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body(&state)
    }

    /// Starts delivering every host's changes after `head` to the store's listener.
    func follow(from head: Int64, store: PostgresStore) {
        let first = locked { s in
            s.following = true
            s.delivered = max(s.delivered, head)
            s.pending.removeAll { $0.last <= s.delivered }
            defer { s.watching = true }
            return !s.watching
        }
        startIfNeeded(store)
        guard first else { return }
        store.watch.on(PGClusterWatch.changesChannel) { [self] payload in
            guard let seq = Int64(payload) else { return }
            wake { s in if s.following && seq > s.delivered { s.needRead = true } }
        }
        store.watch.onReconnect { [self] in wake { s in if s.following { s.needRead = true } } }
    }

    /// A commit of this host (called in seq order, right after it committed).
    func committed(_ b: PGLocalBatch, store: PostgresStore) {
        startIfNeeded(store)
        let listener = store.changes.listener
        wake { s in
            s.localHead = max(s.localHead, b.last)
            guard s.following, let listener, b.last > s.delivered else { return }
            if s.pending.isEmpty && b.first == s.delivered + 1 {
                listener.publish(b.events)
                s.delivered = b.last
            } else {
                s.pending.append(b)
                s.needRead = true
            }
        }
    }

    func stop() { wake { s in s.stopping = true } }

    private func wake(_ change: (inout State) -> Void) {
        pthread_mutex_lock(mutex)
        change(&state)
        pthread_cond_signal(cond)
        pthread_mutex_unlock(mutex)
    }

    private func startIfNeeded(_ store: PostgresStore) {
        guard locked({ s in defer { s.started = true }; return !s.started }) else { return }
        let box = Unmanaged.passRetained(PGFanoutThread(fanout: self, store: store)).toOpaque()
        var tid = pthread_t()
        if pthread_create(&tid, nil, { arg in
            let t = Unmanaged<PGFanoutThread>.fromOpaque(arg!).takeRetainedValue()
            t.fanout.run(t.store)
            return nil
        }, box) != 0 {
            Unmanaged<PGFanoutThread>.fromOpaque(box).release()
            locked { $0.started = false }
            Log.error("realtime: cannot start the fan-out thread")
            return
        }
        pthread_detach(tid)
    }

    private func run(_ store: PostgresStore) {
        while true {
            pthread_mutex_lock(mutex)
            var read = false, announce: Int64 = 0, poll = false
            while true {
                if state.stopping { pthread_mutex_unlock(mutex); return }
                let now = Self.monotonicMillis()
                if state.localHead > state.announced && now - state.lastAnnounce >= Self.announceIntervalMillis {
                    announce = state.localHead
                    state.announced = announce
                    state.lastAnnounce = now
                }
                // Without a listening connection nothing tells this host about the others: poll
                // the feed every second (and try to listen again).
                if state.following && !store.watch.isListening && now - state.lastPoll >= 1000 {
                    state.lastPoll = now
                    state.needRead = true
                    poll = true
                }
                read = state.needRead
                state.needRead = false
                if read || announce > 0 { break }
                let waitMillis: Int64 = state.localHead > state.announced
                    ? Self.announceIntervalMillis - (now - state.lastAnnounce) : 1000
                Self.wait(cond, mutex, millis: max(1, waitMillis))
            }
            pthread_mutex_unlock(mutex)
            if poll { store.watch.ensureStarted(url: store.url) }
            if announce > 0 {
                do throws(ParseError) {
                    try store.announce(announce)
                    announceCount.add(1, ordering: .relaxed)
                } catch {
                    Log.warn("realtime: announcing seq \(announce) failed: \(error.message)")
                }
            }
            if read { catchUp(store) }
        }
    }

    /// Reads the feed after the last delivered seq and delivers it merged with the waiting
    /// local commits.
    private func catchUp(_ store: PostgresStore) {
        guard let listener = store.changes.listener else { return }
        let (after, skip) = locked { s in (s.delivered, s.pending.map { $0.first...$0.last }) }
        let read: PGFeedRead
        do throws(ParseError) {
            read = try store.readFeed(after: after, skip: skip, listener: listener)
        } catch {
            Log.warn("realtime: reading the change feed failed (retried): \(error.message)")
            usleep(500_000)
            wake { $0.needRead = true }
            return
        }
        wake { s in
            var out: [ChangeEvent] = []
            var feed = read.events[...]
            s.pending.sort { $0.first < $1.first }
            func skipped(_ b: PGLocalBatch) -> Bool { skip.contains { $0.lowerBound == b.first } }
            // A full page may end inside a skipped commit: settle only up to its start.
            var upTo = read.maxSeq
            for b in s.pending where skipped(b) && b.first <= upTo && b.last > upTo { upTo = b.first - 1 }
            // Each skipped commit goes in at its seqs, between the feed's rows. A commit that
            // arrived while reading but is in the snapshot came with the feed's rows: dropped.
            while let b = s.pending.first, b.last <= upTo {
                if skipped(b) {
                    while let e = feed.first, e.seq < b.first { out.append(e); feed.removeFirst() }
                    out.append(contentsOf: b.events)
                }
                s.pending.removeFirst()
            }
            out.append(contentsOf: feed)
            var delivered = s.delivered
            var fresh: [ChangeEvent] = []
            for var e in out where e.seq > delivered {
                if e.firstSeq <= delivered { e.firstSeq = delivered + 1 }  // a mark's head already delivered
                fresh.append(e)
            }
            delivered = max(delivered, upTo)
            // Commits made after the snapshot: deliverable now if nothing is missing before them.
            while let b = s.pending.first, b.first <= delivered + 1 {
                fresh.append(contentsOf: b.events.filter { $0.seq > delivered })
                delivered = max(delivered, b.last)
                s.pending.removeFirst()
            }
            if !fresh.isEmpty { listener.publish(fresh) }
            s.delivered = delivered
            if read.full || !s.pending.isEmpty { s.needRead = true }
        }
    }

    static func monotonicMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// Waits on `cond` up to `millis` (the realtime clock: the condition's default).
    static func wait(_ cond: UnsafeMutablePointer<pthread_cond_t>, _ mutex: UnsafeMutablePointer<pthread_mutex_t>, millis: Int64) {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        let ns = Int(ts.tv_nsec) + Int(millis % 1000) * 1_000_000
        ts.tv_sec += Int(millis / 1000) + ns / 1_000_000_000
        ts.tv_nsec = ns % 1_000_000_000
        _ = pthread_cond_timedwait(cond, mutex, &ts)
    }
}

/// What the fan-out thread is started with.
private final class PGFanoutThread {
    let fanout: PGFanout
    let store: PostgresStore
    init(fanout: PGFanout, store: PostgresStore) {
        self.fanout = fanout
        self.store = store
    }
}
