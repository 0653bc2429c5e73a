import MoonbaseCore
import Synchronization

/// Creates and upgrades Moonbase's internal tables, versioned by `PRAGMA user_version`.
///
/// - `_mb_schema(className PRIMARY KEY, fields, indexes, clp)`: one row per class, JSON texts
///   (MoonbaseStore's `SchemaCatalog`).
/// - `_mb_request_ids(id PRIMARY KEY, at)`: `X-Parse-Request-Id`s seen, for 159 dedupe.
public enum Migrator {
    /// The schema version this build writes.
    public static let currentVersion: Int64 = 1

    static let steps: [String] = [
        """
        CREATE TABLE IF NOT EXISTS _mb_schema(
          className TEXT PRIMARY KEY,
          fields TEXT NOT NULL DEFAULT '{}',
          indexes TEXT NOT NULL DEFAULT '{}',
          clp TEXT NOT NULL DEFAULT '{}'
        );
        CREATE TABLE IF NOT EXISTS _mb_request_ids(id TEXT PRIMARY KEY, at INTEGER NOT NULL) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS _mb_request_ids_at ON _mb_request_ids(at);
        """,
    ]

    /// Applies the steps the database has not seen yet, in one transaction.
    static func migrate(_ conn: Connection) throws(ParseError) {
        let version: Int64
        if case .integer(let v)? = try conn.scalar("PRAGMA user_version") { version = v } else { version = 0 }
        guard version < Int64(steps.count) else { return }
        try conn.execute("BEGIN IMMEDIATE")
        do {
            for step in steps[Int(version)...] { try conn.execute(step) }
            try conn.execute("PRAGMA user_version=\(steps.count)")
            try conn.execute("COMMIT")
        } catch {
            _ = try? conn.execute("ROLLBACK")
            throw error
        }
    }
}

extension Database {
    /// How long a request id is remembered (Parse's idempotency window).
    public static let requestIdWindowMillis: Int64 = 5 * 60 * 1000

    /// Records `X-Parse-Request-Id` `id` at `now` (ms). Returns false when the same id was
    /// recorded within the last 5 minutes (the request must then be answered 159, not applied).
    /// Ids older than the window are pruned at most once a minute.
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

/// Process-wide throttle for pruning old request ids (a cheap atomic check per request).
enum RequestIdPruning {
    static let last = Atomic<Int64>(0)
    static func due(now: Int64) -> Bool {
        let prev = last.load(ordering: .relaxed)
        guard now - prev >= 60_000 || now < prev else { return false }
        return last.compareExchange(expected: prev, desired: now, ordering: .relaxed).exchanged
    }
}
