import MoonbaseCore
import MoonbaseSQLite
import Synchronization

extension Database {
    /// How long a request id is remembered (Parse's idempotency window).
    public static let requestIdWindowMillis: Int64 = RequestIdPruning.windowMillis

    /// Records `X-Parse-Request-Id` `id` at `now` (ms) in `_mb_request_ids`. Returns false when
    /// the same id was recorded within the last 5 minutes (the request must then be answered
    /// 159, not applied). Ids older than the window are pruned at most once a minute.
    public func recordRequestId(_ id: String, now: Int64) throws(ParseError) -> Bool {
        let cutoff = now - Database.requestIdWindowMillis
        return try write { (tx) throws(ParseError) -> Bool in
            let c = tx.connection
            if RequestIdPruning.due(now: now) {
                try c.run("DELETE FROM _mb_request_ids WHERE at < ?", [.integer(cutoff)])
            }
            let changed = try c.run("""
                INSERT INTO _mb_request_ids(id, at) VALUES(?1, ?2)
                ON CONFLICT(id) DO UPDATE SET at = excluded.at WHERE _mb_request_ids.at < ?3
                """, [.text(id), .integer(now), .integer(cutoff)])
            return changed > 0
        }
    }
}

/// Process-wide throttle for pruning old request ids (a cheap atomic check per request), and
/// the window itself, for every backend.
enum RequestIdPruning {
    /// How long a request id is remembered (Parse's idempotency window).
    static let windowMillis: Int64 = 5 * 60 * 1000
    static let last = Atomic<Int64>(0)
    static func due(now: Int64) -> Bool {
        let prev = last.load(ordering: .relaxed)
        guard now - prev >= 60_000 || now < prev else { return false }
        return last.compareExchange(expected: prev, desired: now, ordering: .relaxed).exchanged
    }
}
