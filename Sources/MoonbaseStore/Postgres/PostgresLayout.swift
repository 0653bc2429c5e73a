import MoonbaseCore
import MoonbasePostgres

/// The PostgreSQL layout of a class (a collection): one table per class, made on first write.
///
/// ```sql
/// CREATE TABLE "Post"(
///   objectId text PRIMARY KEY,   -- 10 random alphanumerics
///   createdAt bigint NOT NULL,   -- ms since epoch (indexed)
///   updatedAt bigint NOT NULL,   -- ms since epoch (indexed)
///   acl jsonb,                   -- the ACL as given, NULL = public
///   rperm text[],                -- readers ('*', user ids, 'role:Name'), NULL = public read
///   wperm text[],                -- writers, NULL = public write
///   data jsonb NOT NULL          -- the remaining fields
/// );
/// ```
/// Column names are unquoted, so PostgreSQL folds them to lower case in the DDL and in every
/// query alike: SQL text written for the SQLite layout (`objectId`, `createdAt`) names the same
/// columns here. `rperm`/`wperm` are arrays (SQLite keeps `'|a|b|'` text) so an ACL check is one
/// indexable overlap test, `rperm && $1::text[]`. SQLite's `rid` is not needed: geo and text
/// indexes are expression indexes on this table, not side tables keyed by row id.
public enum PostgresLayout {
    /// The `CREATE TABLE` and its `createdAt`/`updatedAt` indexes (idempotent).
    /// - Throws: 103 when `className` is not a valid class name (names are spliced into DDL,
    ///   so only validated ones may reach it).
    public static func classTableDDL(_ className: String) throws(ParseError) -> String {
        guard Naming.isValidClassName(className) else {
            throw ParseError(.invalidClassName, "Invalid class name: \(className)")
        }
        let t = Naming.table(className)
        return """
            CREATE TABLE IF NOT EXISTS \(t)(
              objectId text PRIMARY KEY,
              createdAt bigint NOT NULL,
              updatedAt bigint NOT NULL,
              acl jsonb,
              rperm text[],
              wperm text[],
              data jsonb NOT NULL DEFAULT '{}'
            );
            CREATE INDEX IF NOT EXISTS "\(className)__createdAt" ON \(t)(createdAt);
            CREATE INDEX IF NOT EXISTS "\(className)__updatedAt" ON \(t)(updatedAt);
            """
    }

    /// Creates the class table unless it exists, joining the thread's transaction if one is
    /// open. Two hosts creating the same class at once would collide inside PostgreSQL's
    /// catalogue (`CREATE TABLE IF NOT EXISTS` is not atomic against itself): a per-class
    /// advisory lock makes the second wait and then find the table.
    ///
    /// The one that waited runs no DDL at all: the creator held the lock until it committed, so
    /// the table is visible, and even a no-op `CREATE INDEX IF NOT EXISTS` takes a SHARE lock on
    /// the table until the end of the caller's transaction (a whole request), which blocks every
    /// other writer of the class. A writer holding the class's schema row (adding a field) then
    /// waited for that lock while this transaction waited for the schema row: a deadlock, seen
    /// as one of 16 concurrent first writes to a new class answered 500.
    public static func ensureClassTable(_ className: String, pool: PGPool) throws(ParseError) {
        let ddl = try classTableDDL(className)
        try pool.transaction(isolation: .readCommitted) { (tx) throws(ParseError) in
            try tx.connection.execute("SELECT pg_advisory_xact_lock($1::int, hashtext($2))",
                                      [.integer(classLockSpace), .text(className)])
            let exists = try tx.connection.execute("SELECT to_regclass($1) IS NOT NULL", [.text(Naming.table(className))]).scalar
            if case .bool(true)? = exists { return }
            try tx.connection.executeScript(ddl)
        }
    }

    /// First key of the per-class advisory locks ("mbcl" in ASCII), apart from the migrator's.
    static let classLockSpace: Int64 = 0x6d62_636c
}
