import MoonbaseCore
import MoonbaseCrypto
import MoonbasePostgres

/// The PostgreSQL implementation of the store protocols (`Store` and its parts), for running
/// several identical hosts on one database. SQLite (`SQLiteDocumentStore`) stays the default.
///
/// Layout: one table per class (`PostgresLayout`: `objectid`, `createdat`, `updatedat`, `acl`,
/// `rperm`, `wperm`, `data jsonb`) and the internal `_mb_*` tables (`PostgresMigrator`, run when
/// the store opens; hosts starting together migrate once). The protocol methods live in one file
/// per protocol beside this one (`PostgresStore+<Part>.swift`).
///
/// Transactions are SERIALIZABLE and retried on serialization failure (`PGPool.transaction`);
/// store calls made inside `transaction` on the same thread join it, as on SQLite.
///
/// Thread-safety: `Sendable`; every method may be called from any thread.
///
/// ```swift
/// let store = try PostgresStore(url: "postgres://moonbase@127.0.0.1:5432/app", clock: SystemClock())
/// ```
public final class PostgresStore: Sendable {
    /// The connection URL (`--database`, `MOONBASE_DATABASE_URL`).
    public let url: String
    public let pool: PGPool
    public let clock: any HostClock
    /// Class schemas as this host last read them (`PostgresStore+Schema.swift`).
    let schemaCache = PGSchemaCache()
    /// What the other hosts sharing the database announce (`PGClusterWatch.swift`).
    let watch = PGClusterWatch()
    /// Who hears the changes committed on this host, and the order they are told in
    /// (`PostgresStore+ChangeFeed.swift`).
    let changes = ChangeListenerSlot()
    let publishOrder = PGPublishSequencer()
    /// This store's part of the shared per-minute rate windows (one row per key, minute and
    /// host; a window's count is the sum of the parts).
    let usageHost = Random.alphanumeric(12)
    /// Merges the other hosts' changes into this host's listener, and announces this host's
    /// (`PostgresStore+Fanout.swift`).
    let fanout = PGFanout()

    /// How old a feed row must be before compaction may remove the rows it supersedes: the
    /// other hosts read those rows (`prev`) to tell enter, update and leave apart, typically
    /// milliseconds after the commit.
    public let feedCompactionGraceMillis: Int64

    /// Opens a pool on `url` and brings the internal tables to the current version.
    public init(url: String, clock: any HostClock = SystemClock(), options: PGPool.Options = PGPool.Options(),
                feedCompactionGraceMillis: Int64 = 60_000) throws(ParseError) {
        self.url = url
        self.clock = clock
        self.feedCompactionGraceMillis = feedCompactionGraceMillis
        self.pool = try PGPool(url: url, options: options)
        _ = try PostgresMigrator.migrate(pool)
        let cache = schemaCache
        watch.on(PGClusterWatch.schemaChannel) { className in cache.invalidate(className) }
        watch.onReconnect { cache.invalidate(nil) }
    }
}
