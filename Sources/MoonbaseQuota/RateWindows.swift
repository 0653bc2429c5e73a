import Synchronization

/// The per-minute counters of one stripe. All entries belong to `minute`: windows are fixed and
/// aligned to the UTC minute, so a new minute simply empties the table.
struct WindowTable: Sendable {
    var minute: Int64 = .min
    var counts: [String: Int64] = [:]
    /// Keys changed since the last flush (their absolute counts are written, not deltas).
    var dirty: Set<String> = []
    /// Hosts sharing a database: this host's own requests per key (inside `counts`), the value
    /// of it last written, and the other hosts' requests already added to `counts`.
    var own: [String: Int64] = [:]
    var ownFlushed: [String: Int64] = [:]
    var others: [String: Int64] = [:]

    mutating func roll(to minute: Int64) {
        guard minute != self.minute else { return }
        if minute > self.minute {
            self.minute = minute
            counts.removeAll(keepingCapacity: true)
            dirty.removeAll(keepingCapacity: true)
            own.removeAll(keepingCapacity: true)
            ownFlushed.removeAll(keepingCapacity: true)
            others.removeAll(keepingCapacity: true)
        }
    }
}

/// Fixed one-minute request windows per caller (`user:…`/`ip:…`) and per function and caller
/// (`function:stats|user:…`).
///
/// Fixed windows (not sliding) were chosen because a window is then one integer per key, the
/// reset time is the same for everyone (the next UTC minute) and it survives a restart as a plain
/// row. The known cost: a client can make up to 2 × limit requests across a minute boundary.
///
/// Concurrency: `Sendable` behind lock stripes picked by the key's hash, so two callers contend
/// only when their keys share a stripe.
final class RateWindows: Sendable {
    private let stripes: [Stripe<WindowTable>]
    private let mask: Int

    init(stripes requested: Int) {
        let n = stripeCount(requested)
        stripes = (0..<n).map { _ in Stripe(WindowTable()) }
        mask = n - 1
    }

    @inline(__always)
    private func stripe(_ key: String) -> Stripe<WindowTable> { stripes[key.hashValue & mask] }

    /// Counts one request for `key` in `minute` unless it already reached `limit`. Returns whether
    /// it was counted and the count after the call.
    func acquire(_ key: String, limit: Int64, minute: Int64) -> (taken: Bool, count: Int64) {
        stripe(key).state.withLock { t in
            // A clock stepped backwards keeps counting in the newer window rather than refusing.
            t.roll(to: minute)
            let c = t.counts[key] ?? 0
            if c >= limit { return (false, c) }
            t.counts[key] = c + 1
            t.own[key, default: 0] += 1
            t.dirty.insert(key)
            return (true, c + 1)
        }
    }

    /// Gives back one request counted for `key` in `minute`.
    func release(_ key: String, minute: Int64) {
        stripe(key).state.withLock { t in
            guard t.minute == minute, let c = t.counts[key], c > 0 else { return }
            t.counts[key] = c - 1
            if let o = t.own[key], o > 0 { t.own[key] = o - 1 }
            t.dirty.insert(key)
        }
    }

    /// Requests counted for `key` in `minute`.
    func count(_ key: String, minute: Int64) -> Int64 {
        stripe(key).state.withLock { t in t.minute == minute ? t.counts[key] ?? 0 : 0 }
    }

    /// Raises counts to the loaded values (after a restart); windows of other minutes are ignored.
    func restore(_ windows: [WindowCount], minute: Int64) {
        for w in windows where w.minute == minute {
            stripe(w.key).state.withLock { t in
                t.roll(to: minute)
                guard t.minute == minute else { return }
                if w.count > t.counts[w.key] ?? 0 { t.counts[w.key] = w.count }
                // Loaded at start: all of it is other hosts' (or an earlier run's) requests.
                if w.count > t.others[w.key] ?? 0 { t.others[w.key] = w.count }
            }
        }
    }

    /// Absolute counts of the windows of `minute` changed since the last call.
    func drainDirty(minute: Int64) -> [WindowCount] {
        var out: [WindowCount] = []
        for s in stripes {
            s.state.withLock { t in
                guard t.minute == minute, !t.dirty.isEmpty else { return }
                for key in t.dirty {
                    let own = t.own[key] ?? 0
                    out.append(WindowCount(key: key, minute: minute, count: t.counts[key] ?? 0, own: own))
                    t.ownFlushed[key] = own
                }
                t.dirty.removeAll(keepingCapacity: true)
            }
        }
        return out
    }

    /// Marks windows as changed again (their write failed).
    func markDirty(_ windows: [WindowCount]) {
        for w in windows {
            stripe(w.key).state.withLock { t in
                if t.minute == w.minute { t.dirty.insert(w.key) }
            }
        }
    }

    /// The keys counted in `minute` (whose totals a host sharing the database must learn).
    func keys(minute: Int64) -> [String] {
        var out: [String] = []
        for s in stripes {
            s.state.withLock { t in if t.minute == minute { out += t.counts.keys } }
        }
        return out
    }

    /// Hosts sharing a database: `totals` are the windows of `minute` summed over every host's
    /// part (this host's as last written included); adds to each key's count the other hosts'
    /// requests it did not know yet.
    func absorb(_ totals: [String: Int64], minute: Int64) {
        for (key, total) in totals {
            stripe(key).state.withLock { t in
                guard t.minute == minute else { return }
                let others = total - (t.ownFlushed[key] ?? 0)
                let known = t.others[key] ?? 0
                guard others > known else { return }
                t.counts[key, default: 0] += others - known
                t.others[key] = others
            }
        }
    }
}
