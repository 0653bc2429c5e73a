import MoonbaseCore
import MoonbaseSQLite

/// Creates and upgrades every internal table of the SQLite store, versioned by
/// `PRAGMA user_version`: each step runs once, in order, in the same write transaction as the
/// version bump, so a database is either at the old version or fully at the new one.
///
/// Class data (class tables, relation join tables, geo and text side tables, declared indexes)
/// is not here: the schema catalog creates it when a class or field first appears.
///
/// - Version 1: `_mb_schema(className PRIMARY KEY, fields, indexes, clp)` (one row per class,
///   JSON texts; `SchemaCatalog`) and `_mb_request_ids(id PRIMARY KEY, at)` (the
///   `X-Parse-Request-Id`s seen, for the 159 answer).
/// - Version 2: every other internal table, which earlier releases created with
///   `IF NOT EXISTS` from the module that used it; so this step is written to succeed on a
///   database that already has some or all of them (`IF NOT EXISTS`, `OR IGNORE`, a column
///   check). Tables: the change feed (`_mb_changes`, `_mb_changes_meta`), usage (`_mb_usage`,
///   `_mb_usage_window`), accounts (`_mb_auth_epoch` and its triggers, `_mb_login_failures`,
///   the `_User` tables the unique lower-cased email index and the triggers hang on), file
///   metadata (`_mb_files`), Parse Config (`_mb_config`) and account mail tokens
///   (`_mb_email_tokens`).
/// - Version 3: the change feed's by-object index (`_mb_changes_obj`) holds save rows only
///   (`WHERE op = 'save'`). Its key (class, objectId) is random, so every indexed row costs a
///   random B-tree insert; tombstones are never looked up by object (see `ChangeFeed`), and a
///   bulk delete writes one per deleted row: leaving them out cut W6 cleanup's SQL CPU by ~30%.
/// - Version 4: change-feed rows carry the object's `rid` (the class table's row id), and the
///   by-object index is keyed by (class, rid) instead of (class, objectId). A create's rid is
///   its class's highest, so its feed row lands at the index's right edge, where the random
///   objectId put every create on a random leaf (replayed, 32 creates per transaction over a
///   200,000-row feed: 15 → 4.6 µs CPU per feed row). Rows written before are given their
///   object's rid; the feed is first compacted under the old index, so what stays without a rid
///   (saves of objects already gone, tombstones) is never looked up by object again.
/// - Version 5: a GeoPoint field's R*Tree gets a new object's row from the create itself
///   (`WriteTransaction.insertGeoRows`), not from an `AFTER INSERT` trigger (a sub-program and a
///   parse of the row's JSON text per create): the insert triggers (`C__geo__f__ai`) are dropped.
///   The update and delete triggers stay.
public enum Migrator {
    /// The schema version this build writes.
    public static let currentVersion: Int64 = 5

    /// Brings a database at version `version - 1` to `version`.
    static func apply(version: Int64, _ c: Connection) throws(ParseError) {
        switch version {
        case 1: try c.execute(version1)
        case 2: try upgradeToVersion2(c)
        case 3: try c.execute(version3)
        case 4: try upgradeToVersion4(c)
        case 5: try upgradeToVersion5(c)
        default: throw ParseError.internalError("no migration to schema version \(version)")
        }
    }

    static let version1 = """
        CREATE TABLE IF NOT EXISTS _mb_schema(
          className TEXT PRIMARY KEY,
          fields TEXT NOT NULL DEFAULT '{}',
          indexes TEXT NOT NULL DEFAULT '{}',
          clp TEXT NOT NULL DEFAULT '{}'
        );
        CREATE TABLE IF NOT EXISTS _mb_request_ids(id TEXT PRIMARY KEY, at INTEGER NOT NULL) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS _mb_request_ids_at ON _mb_request_ids(at);
        """

    static func upgradeToVersion2(_ c: Connection) throws(ParseError) {
        try c.execute(changeFeedTables)
        try c.execute(usageTables)
        // `events` was added to `_mb_usage` after the table first shipped.
        if try c.scalar("SELECT 1 FROM pragma_table_info('_mb_usage') WHERE name = 'events'") == nil {
            try c.execute("ALTER TABLE _mb_usage ADD COLUMN events INTEGER NOT NULL DEFAULT 0")
        }
        try c.execute(Naming.classTableDDL("_User"))
        try c.execute(Naming.classTableDDL("_Session"))
        try c.execute(accountTables)
        try c.execute(fileConfigMailTables)
    }

    /// The change feed (see `ChangeFeed`).
    static let changeFeedTables = """
        CREATE TABLE IF NOT EXISTS _mb_changes(
          seq INTEGER PRIMARY KEY AUTOINCREMENT,
          cls TEXT NOT NULL, oid TEXT NOT NULL, op TEXT NOT NULL,
          at INTEGER NOT NULL, perm TEXT);
        CREATE INDEX IF NOT EXISTS _mb_changes_cls_seq ON _mb_changes(cls, seq);
        CREATE INDEX IF NOT EXISTS _mb_changes_obj ON _mb_changes(cls, oid) WHERE op = 'save';
        CREATE INDEX IF NOT EXISTS _mb_changes_tomb ON _mb_changes(at) WHERE op = 'delete';
        CREATE TABLE IF NOT EXISTS _mb_changes_meta(k TEXT PRIMARY KEY, v INTEGER NOT NULL);
        """

    /// The by-object index of the change feed without tombstones (rebuilt: earlier versions
    /// indexed every row).
    static let version3 = """
        DROP INDEX IF EXISTS _mb_changes_obj;
        CREATE INDEX _mb_changes_obj ON _mb_changes(cls, oid) WHERE op = 'save';
        """

    /// The change feed's by-object index keyed by the object's rid (see version 4 above).
    static func upgradeToVersion4(_ c: Connection) throws(ParseError) {
        // Compact what the old index can still match (every row not compacted yet), so no
        // superseded save is left for a later row to find by a rid it does not have.
        _ = try ChangeFeed.compactPass(c, batch: .max, by: .oid)
        if try c.scalar("SELECT 1 FROM pragma_table_info('_mb_changes') WHERE name = 'rid'") == nil {
            try c.execute("ALTER TABLE _mb_changes ADD COLUMN rid INTEGER")
        }
        var classes: [String] = []
        try c.query("SELECT DISTINCT cls FROM _mb_changes WHERE rid IS NULL AND op = 'save'") { s in
            if let cls = s.text(0) { classes.append(cls) }
        }
        for cls in classes where try c.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(cls)]) != nil {
            _ = try c.run("""
                UPDATE _mb_changes SET rid = (SELECT t.rid FROM \(Naming.table(cls)) t WHERE t.objectId = _mb_changes.oid)
                WHERE cls = ? AND rid IS NULL AND op = 'save'
                """, [.text(cls)])
        }
        try c.execute("""
            DROP INDEX IF EXISTS _mb_changes_obj;
            CREATE INDEX _mb_changes_obj ON _mb_changes(cls, rid) WHERE op = 'save';
            """)
    }

    /// Drops the R*Tree insert triggers (see version 5 above). Their names are
    /// `"C__geo__f__ai"` on the class table `C`; the table a trigger hangs on is checked, so a
    /// class or field whose own name holds `__geo__` is not mistaken for one.
    static func upgradeToVersion5(_ c: Connection) throws(ParseError) {
        var names: [String] = []
        try c.query("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%\\_\\_geo\\_\\_%\\_\\_ai' ESCAPE '\\'") { s in
            // Class and field names are identifiers (no quotes); anything else is not ours.
            guard let name = s.text(0), let table = s.text(1), name.hasPrefix(table + "__geo__"),
                  !name.contains("\"") else { return }
            names.append(name)
        }
        for name in names {
            try c.execute("DROP TRIGGER IF EXISTS \"\(name)\"")
        }
    }

    /// Usage: one row per (kind, key, UTC hour) with summed counts; monthly figures are sums of
    /// the month's hourly rows, so nothing is stored twice. Rate windows: one row per key.
    static let usageTables = """
        CREATE TABLE IF NOT EXISTS _mb_usage (
          hour INTEGER NOT NULL,            -- ms since the epoch, start of the UTC hour
          kind TEXT NOT NULL,               -- 'account' | 'function'
          key TEXT NOT NULL,                -- 'app', 'user:ID', 'ip:ADDR' | 'function:NAME', 'route:GET /p', 'class:Post'…
          units INTEGER NOT NULL DEFAULT 0,
          refused INTEGER NOT NULL DEFAULT 0,
          db_reads INTEGER NOT NULL DEFAULT 0,
          db_writes INTEGER NOT NULL DEFAULT 0,
          lua_cpu_us INTEGER NOT NULL DEFAULT 0,
          wall_us INTEGER NOT NULL DEFAULT 0,
          bytes_in INTEGER NOT NULL DEFAULT 0,
          bytes_out INTEGER NOT NULL DEFAULT 0,
          events INTEGER NOT NULL DEFAULT 0,
          PRIMARY KEY (kind, key, hour)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS _mb_usage_by_hour ON _mb_usage (kind, hour);
        CREATE TABLE IF NOT EXISTS _mb_usage_window (
          key TEXT PRIMARY KEY,             -- 'user:ID', 'ip:ADDR', 'function:NAME|user:ID'
          minute INTEGER NOT NULL,          -- ms since the epoch, start of the UTC minute
          count INTEGER NOT NULL
        ) WITHOUT ROWID;
        """

    /// Accounts: the lower-cased email is unique (case-insensitive matching); `_mb_auth_epoch`
    /// counts every change to a user or a session (the session cache's validity, see
    /// `AccountStore.authEpoch`); deleting a user deletes their sessions whichever path deletes
    /// the row; a `_User` row may never hold a `password` field (119: generic object paths would
    /// otherwise store it as given; only the accounts service sets a password, hashed).
    static let accountTables = """
        CREATE UNIQUE INDEX IF NOT EXISTS "_User__auth_email" ON "_User"(lower(json_extract(data,'$.email')));
        CREATE TABLE IF NOT EXISTS _mb_auth_epoch(id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS _mb_login_failures(key TEXT PRIMARY KEY, start INTEGER NOT NULL,
          failures INTEGER NOT NULL);
        INSERT OR IGNORE INTO _mb_auth_epoch(id, n) VALUES (1, 0);
        CREATE TRIGGER IF NOT EXISTS "_User__auth_epoch_u" AFTER UPDATE ON "_User" BEGIN
          UPDATE _mb_auth_epoch SET n = n + 1 WHERE id = 1;
        END;
        CREATE TRIGGER IF NOT EXISTS "_User__auth_epoch_d" AFTER DELETE ON "_User" BEGIN
          UPDATE _mb_auth_epoch SET n = n + 1 WHERE id = 1;
          DELETE FROM "_Session" WHERE json_extract(data,'$.user.objectId') = old.objectId;
        END;
        CREATE TRIGGER IF NOT EXISTS "_Session__auth_epoch_u" AFTER UPDATE ON "_Session" BEGIN
          UPDATE _mb_auth_epoch SET n = n + 1 WHERE id = 1;
        END;
        CREATE TRIGGER IF NOT EXISTS "_Session__auth_epoch_d" AFTER DELETE ON "_Session" BEGIN
          UPDATE _mb_auth_epoch SET n = n + 1 WHERE id = 1;
        END;
        CREATE TRIGGER IF NOT EXISTS "_User__auth_no_plain_i" BEFORE INSERT ON "_User"
          WHEN json_extract(new.data,'$.password') IS NOT NULL BEGIN
          SELECT RAISE(ABORT, '\(plaintextRefusal)');
        END;
        CREATE TRIGGER IF NOT EXISTS "_User__auth_no_plain_u" BEFORE UPDATE OF data ON "_User"
          WHEN json_extract(new.data,'$.password') IS NOT NULL BEGIN
          SELECT RAISE(ABORT, '\(plaintextRefusal)');
        END;
        """

    /// The refusal's message: `mb<code>:` makes the store report it as that Parse code (119).
    static let plaintextRefusal =
        "mb119: a _User password can only be set through sign-up or the users endpoint (it is hashed there)"

    /// Uploaded files' metadata (the bytes are files on disk), Parse Config parameters (JSON
    /// values), and the hashes of password-reset and email-verification tokens.
    static let fileConfigMailTables = """
        CREATE TABLE IF NOT EXISTS _mb_files(name TEXT PRIMARY KEY, contentType TEXT NOT NULL,
          size INTEGER NOT NULL, createdAt INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS _mb_config(name TEXT PRIMARY KEY, value TEXT NOT NULL,
          masterKeyOnly INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS _mb_email_tokens(hash TEXT PRIMARY KEY, userId TEXT NOT NULL,
          kind TEXT NOT NULL, email TEXT NOT NULL, expiresAt INTEGER NOT NULL) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS _mb_email_tokens_user ON _mb_email_tokens(userId, kind);
        """

    /// Applies the steps `database` has not seen yet, in one write transaction (the version is
    /// read inside it, so two processes opening the same file at once migrate it once).
    /// - Throws: `ParseError` 1 when a step fails (nothing is applied then), e.g. duplicate
    ///   lower-cased emails in an old database refusing the unique index.
    public static func migrate(_ database: Database) throws(ParseError) {
        try database.write { (tx) throws(ParseError) in
            let c = tx.connection
            let version: Int64
            if case .integer(let v)? = try c.scalar("PRAGMA user_version") { version = v } else { version = 0 }
            guard version < currentVersion else { return }
            for next in (version + 1)...currentVersion { try apply(version: next, c) }
            try c.execute("PRAGMA user_version=\(currentVersion)")
        }
    }
}
