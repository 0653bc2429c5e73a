import MoonbaseCore
import MoonbaseSQLite

extension SQLiteDocumentStore: BackupStore {
    /// Opens (creating it if needed) the database file at `path` and attaches a store to it.
    public convenience init(path: String, clock: any HostClock = SystemClock()) throws(ParseError) {
        try self.init(database: Database(path: path), clock: clock)
    }

    /// SQLite's online backup: a consistent copy while readers and the writer go on.
    public func backup(to path: String) throws(ParseError) {
        try database.backup(to: path)
    }
}
