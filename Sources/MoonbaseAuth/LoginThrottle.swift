import MoonbaseCore
import Synchronization

/// Counts failed logins per key (`user:<id>`, `name:<login>`, `ip:<address>`) in fixed windows
/// and refuses attempts once a key reached the limit.
///
/// A window opens at a key's first failure and lasts `windowMillis`; once `maxFailures` failures
/// fell in it, every attempt for that key is refused with 155 (HTTP 429) and a `Retry-After`
/// header (seconds until the window closes), whether its password is right or not. A successful
/// login clears the account's key (not the IP's). `maxFailures == 0` turns throttling off.
///
/// The auth service records each failure in the store before answering and reads the saved
/// counts on every check (`adopt`), so hosts sharing a database count the same failures and a
/// restart does not reset an attacker's count; this table is the fallback when the database
/// cannot be read or written. It is bounded (expired windows are pruned, the oldest dropped
/// beyond `capacity`).
///
/// Thread-safety: `Sendable`; one `Mutex` around the table (a login already costs an argon2id
/// verification, so the lock is never the bottleneck).
public final class LoginThrottle: Sendable {
    struct Window { var start: Int64; var failures: Int }

    public let maxFailures: Int
    public let windowMillis: Int64
    let capacity: Int
    private let clock: any HostClock
    private let windows = Mutex<[String: Window]>([:])

    public init(maxFailures: Int, windowMillis: Int64, clock: any HostClock, capacity: Int = 100_000) {
        self.maxFailures = maxFailures
        self.windowMillis = windowMillis
        self.clock = clock
        self.capacity = max(capacity, 16)
    }

    public var isEnabled: Bool { maxFailures > 0 }

    /// Throws 155 when any of `keys` is over the limit.
    /// - Throws: `ParseError` 155, status 429, with `Retry-After` in whole seconds (at least 1).
    public func check(_ keys: [String]) throws(ParseError) {
        guard isEnabled else { return }
        let now = clock.nowMillis()
        let waitMillis: Int64 = windows.withLock { w in
            var longest: Int64 = 0
            for k in keys {
                guard let win = w[k], win.failures >= maxFailures else { continue }
                let left = win.start + windowMillis - now
                if left > 0 { longest = max(longest, left) }
            }
            return longest
        }
        guard waitMillis > 0 else { return }
        let seconds = (waitMillis + 999) / 1000
        throw ParseError(.requestLimitExceeded, "Too many failed login attempts; try again in \(seconds) seconds.",
                         headers: [("Retry-After", String(seconds))], status: 429)
    }

    /// Counts one failure against each key.
    public func recordFailure(_ keys: [String]) {
        guard isEnabled else { return }
        let now = clock.nowMillis()
        windows.withLock { w in
            for k in keys {
                if var win = w[k], now - win.start < windowMillis {
                    win.failures += 1
                    w[k] = win
                } else {
                    w[k] = Window(start: now, failures: 1)
                }
            }
            if w.count > capacity { prune(&w, now: now) }
        }
    }

    /// Forgets the failures of `key` (a successful login resets its account).
    public func reset(_ key: String) {
        guard isEnabled else { return }
        _ = windows.withLock { $0.removeValue(forKey: key) }
    }

    /// The open window of `key` (start, failures), if any (what the auth service persists).
    public func window(_ key: String) -> (start: Int64, failures: Int)? {
        let now = clock.nowMillis()
        return windows.withLock { w in
            guard let win = w[key], now - win.start < windowMillis else { return nil }
            return (win.start, win.failures)
        }
    }

    /// Puts back a window read from storage at start (closed windows are ignored).
    public func restore(_ key: String, start: Int64, failures: Int) {
        guard isEnabled, clock.nowMillis() - start < windowMillis, failures > 0 else { return }
        windows.withLock { $0[key] = Window(start: start, failures: failures) }
    }

    /// Replaces the windows of `keys` with `saved` (the counts every host recorded): a key
    /// missing from `saved` has no open window (a login on another host may have reset it).
    /// Keeps a higher count this host holds for the same window (failures counted here while
    /// the database could not be written).
    public func adopt(_ keys: [String], _ saved: [(key: String, start: Int64, failures: Int)]) {
        guard isEnabled else { return }
        let now = clock.nowMillis()
        windows.withLock { w in
            for k in keys {
                if let s = saved.first(where: { $0.key == k }), now - s.start < windowMillis {
                    if let mine = w[k], mine.start == s.start, mine.failures > s.failures { continue }
                    w[k] = Window(start: s.start, failures: s.failures)
                } else {
                    w.removeValue(forKey: k)
                }
            }
            if w.count > capacity { prune(&w, now: now) }
        }
    }

    /// Failures currently counted for `key` in its open window (tests, diagnostics).
    public func failures(_ key: String) -> Int {
        let now = clock.nowMillis()
        return windows.withLock { w in
            guard let win = w[key], now - win.start < windowMillis else { return 0 }
            return win.failures
        }
    }

    /// Drops closed windows, then the oldest ones until the table is at 3/4 of its capacity.
    private func prune(_ w: inout [String: Window], now: Int64) {
        w = w.filter { now - $0.value.start < windowMillis }
        let target = capacity * 3 / 4
        guard w.count > target else { return }
        let oldest = w.sorted { $0.value.start < $1.value.start }.prefix(w.count - target).map(\.key)
        for k in oldest { w.removeValue(forKey: k) }
    }
}
