import MoonbaseCore

/// `moonbase backup` copies a SQLite file; a PostgreSQL database is backed up with the
/// server's own tools, which copy it consistently while hosts keep writing.
extension PostgresStore: BackupStore {
    /// What `backup` answers on PostgreSQL (and `moonbase backup --database …` prints).
    public static let backupRefusal = """
        moonbase backup copies a SQLite database only; back up a PostgreSQL database with pg_dump, \
        e.g. pg_dump --format=custom --file=moonbase.dump "$MOONBASE_DATABASE_URL" (restore with pg_restore)
        """

    /// Always throws 108 (`backupRefusal`): nothing is written to `path`.
    public func backup(to path: String) throws(ParseError) {
        throw ParseError(.commandUnavailable, Self.backupRefusal)
    }
}
