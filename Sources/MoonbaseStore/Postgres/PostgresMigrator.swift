import MoonbaseCore
import MoonbasePostgres

/// Creates and upgrades Moonbase's internal tables on PostgreSQL, versioned in `_mb_migrations`
/// (one row per applied step), the counterpart of the SQLite migrator's `PRAGMA user_version`.
///
/// Several hosts may start at once against one database: `migrate` runs every missing step in
/// one transaction under a transaction-scoped advisory lock, so one host applies them and the
/// others find them applied. PostgreSQL's DDL is transactional: a failing step leaves nothing
/// half-made. Every statement is `IF NOT EXISTS`, so a database whose tables were made before
/// the version table existed upgrades too. Names and types mirror the SQLite tables; times are
/// `bigint` milliseconds since the epoch, JSON documents `jsonb` (`_mb_schema` keeps JSON text:
/// its field order is what `GET /schemas` reports, and `jsonb` would reorder it).
///
/// ```swift
/// let pool = try PGPool(url: "postgres://moonbase@db:5432/moonbase")
/// try PostgresMigrator.migrate(pool)   // idempotent; safe from many hosts at once
/// ```
public enum PostgresMigrator {
    /// The schema version this build writes.
    public static var currentVersion: Int { steps.count }

    /// Key of the advisory lock taken while migrating ("moonbase" in ASCII).
    static let lockKey: Int64 = 0x6d6f_6f6e_6261_7365

    static let steps: [String] = [
        // 1: every internal table of the single-host release.
        """
        CREATE TABLE IF NOT EXISTS _mb_schema(
          className text PRIMARY KEY,
          fields text NOT NULL DEFAULT '{}',
          indexes text NOT NULL DEFAULT '{}',
          clp text NOT NULL DEFAULT '{}'
        );
        CREATE TABLE IF NOT EXISTS _mb_request_ids(id text PRIMARY KEY, at bigint NOT NULL);
        CREATE INDEX IF NOT EXISTS _mb_request_ids_at ON _mb_request_ids(at);

        CREATE SEQUENCE IF NOT EXISTS _mb_changes_seq AS bigint;
        CREATE TABLE IF NOT EXISTS _mb_changes(
          seq bigint PRIMARY KEY DEFAULT nextval('_mb_changes_seq'),
          cls text NOT NULL, oid text NOT NULL, op text NOT NULL,
          at bigint NOT NULL, perm text);
        ALTER SEQUENCE _mb_changes_seq OWNED BY _mb_changes.seq;
        CREATE INDEX IF NOT EXISTS _mb_changes_cls_seq ON _mb_changes(cls, seq);
        CREATE INDEX IF NOT EXISTS _mb_changes_obj ON _mb_changes(cls, oid);
        CREATE INDEX IF NOT EXISTS _mb_changes_tomb ON _mb_changes(at) WHERE op = 'delete';
        CREATE TABLE IF NOT EXISTS _mb_changes_meta(k text PRIMARY KEY, v bigint NOT NULL);

        CREATE TABLE IF NOT EXISTS _mb_usage(
          hour bigint NOT NULL,
          kind text NOT NULL,
          key text NOT NULL,
          units bigint NOT NULL DEFAULT 0,
          refused bigint NOT NULL DEFAULT 0,
          db_reads bigint NOT NULL DEFAULT 0,
          db_writes bigint NOT NULL DEFAULT 0,
          lua_cpu_us bigint NOT NULL DEFAULT 0,
          wall_us bigint NOT NULL DEFAULT 0,
          bytes_in bigint NOT NULL DEFAULT 0,
          bytes_out bigint NOT NULL DEFAULT 0,
          events bigint NOT NULL DEFAULT 0,
          PRIMARY KEY (kind, key, hour));
        CREATE INDEX IF NOT EXISTS _mb_usage_by_hour ON _mb_usage(kind, hour);
        CREATE TABLE IF NOT EXISTS _mb_usage_window(key text PRIMARY KEY, minute bigint NOT NULL, count bigint NOT NULL);

        CREATE TABLE IF NOT EXISTS _mb_auth_epoch(id int PRIMARY KEY CHECK (id = 1), n bigint NOT NULL);
        INSERT INTO _mb_auth_epoch(id, n) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
        CREATE TABLE IF NOT EXISTS _mb_login_failures(key text PRIMARY KEY, start bigint NOT NULL, failures bigint NOT NULL);

        CREATE TABLE IF NOT EXISTS _mb_files(name text PRIMARY KEY, contentType text NOT NULL,
          size bigint NOT NULL, createdAt bigint NOT NULL);
        CREATE TABLE IF NOT EXISTS _mb_config(name text PRIMARY KEY, value text NOT NULL,
          masterKeyOnly boolean NOT NULL DEFAULT false);
        CREATE TABLE IF NOT EXISTS _mb_email_tokens(hash text PRIMARY KEY, userId text NOT NULL,
          kind text NOT NULL, email text NOT NULL, expiresAt bigint NOT NULL);
        CREATE INDEX IF NOT EXISTS _mb_email_tokens_user ON _mb_email_tokens(userId, kind);
        """,
        // 2: the trigger function that keeps Relation join tables clean: fired after a row of an
        // owner or target class is deleted, it removes the join rows naming that object
        // (argument 0: the join table, 1: its column, `owningid` or `relatedid`).
        """
        CREATE OR REPLACE FUNCTION _mb_join_cleanup() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          EXECUTE format('DELETE FROM %I WHERE %I = $1', TG_ARGV[0], TG_ARGV[1]) USING OLD.objectid;
          RETURN NULL;
        END $$;
        """,
        // 3: the GiST index of every GeoPoint field of a class made before geo indexes existed
        // (new fields get theirs when they are added: PostgresLayout.geoIndexDDL, whose
        // expression this must spell the same way for queries to use it).
        """
        DO $$
        DECLARE r record;
        BEGIN
          FOR r IN SELECT s.className AS cls, f.key AS field
                   FROM _mb_schema s, jsonb_each(s.fields::jsonb) f
                   WHERE f.value ->> 'type' = 'GeoPoint' AND to_regclass(format('%I', s.className)) IS NOT NULL LOOP
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I USING gist (point((data #>> %L)::float8, (data #>> %L)::float8))',
                           r.cls || '__geo__' || r.field, r.cls,
                           '{' || r.field || ',longitude}', '{' || r.field || ',latitude}');
          END LOOP;
        END $$;
        """,
        // 4: per-minute rate windows shared by several hosts: each host writes its own part of a
        // window (its requests), and a window's count is the sum of the parts.
        """
        ALTER TABLE _mb_usage_window ADD COLUMN IF NOT EXISTS host text NOT NULL DEFAULT '';
        ALTER TABLE _mb_usage_window DROP CONSTRAINT IF EXISTS _mb_usage_window_pkey;
        ALTER TABLE _mb_usage_window ADD PRIMARY KEY (key, minute, host);
        """,
        // 5: many hosts. `prev`: the object before an update or delete, so a host that did not
        // make the write can tell update from enter and leave. `_mb_code`: the Cloud Code
        // bundle deployed to any host (one row; `files` a JSON array of [name, source]).
        """
        ALTER TABLE _mb_changes ADD COLUMN IF NOT EXISTS prev jsonb;
        CREATE TABLE IF NOT EXISTS _mb_code(id int PRIMARY KEY CHECK (id = 1), version bigint NOT NULL,
          files text NOT NULL, at bigint NOT NULL);
        """,
        // 6: the geo cell index (grid cell of the point, createdAt, objectId) of every GeoPoint
        // field of a class made before it existed (new fields get theirs with the GiST index:
        // PostgresLayout.geoIndexDDL and geoCellExpr, whose expression this must spell the same
        // way for queries to use it). Writes to the class wait while its index is built.
        """
        DO $$
        DECLARE r record;
        BEGIN
          FOR r IN SELECT s.className AS cls, f.key AS field
                   FROM _mb_schema s, jsonb_each(s.fields::jsonb) f
                   WHERE f.value ->> 'type' = 'GeoPoint' AND to_regclass(format('%I', s.className)) IS NOT NULL LOOP
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I ((floor(((data #>> %L)::float8 + 90) * 20)::int8 * 8192 '
                           '+ floor(((data #>> %L)::float8 + 180) * 20)::int8), createdAt, objectId COLLATE "C")',
                           r.cls || '__geocell__' || r.field, r.cls,
                           '{' || r.field || ',latitude}', '{' || r.field || ',longitude}');
          END LOOP;
        END $$;
        """,
    ]

    /// Applies the steps the database has not seen yet, in one transaction, and returns the
    /// version it is at afterwards.
    /// - Throws: `ParseError` from PostgreSQL (the transaction then changed nothing).
    @discardableResult
    public static func migrate(_ pool: PGPool) throws(ParseError) -> Int {
        try pool.transaction(isolation: .readCommitted) { (tx) throws(ParseError) -> Int in
            let c = tx.connection
            // Read committed, after the lock: the version read below sees another host's
            // finished migration.
            try c.execute("SELECT pg_advisory_xact_lock($1)", [.integer(lockKey)])
            try c.executeScript("CREATE TABLE IF NOT EXISTS _mb_migrations(version int PRIMARY KEY, appliedAt bigint NOT NULL)")
            let have = Int(try c.execute("SELECT coalesce(max(version), 0)::int8 FROM _mb_migrations").scalar?.int64 ?? 0)
            guard have < steps.count else { return have }
            for v in (have + 1)...steps.count {
                try c.executeScript(steps[v - 1])
                try c.execute("""
                    INSERT INTO _mb_migrations(version, appliedAt)
                    VALUES ($1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                    """, [.integer(Int64(v))])
            }
            return steps.count
        }
    }

    /// The version the database is at (0 before the first migration).
    public static func version(_ pool: PGPool) throws(ParseError) -> Int {
        try pool.withConnection { (c) throws(ParseError) -> Int in
            guard try c.execute("SELECT to_regclass('_mb_migrations') IS NOT NULL").scalar == .bool(true) else { return 0 }
            return Int(try c.execute("SELECT coalesce(max(version), 0)::int8 FROM _mb_migrations").scalar?.int64 ?? 0)
        }
    }
}
