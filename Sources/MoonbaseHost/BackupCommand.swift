import MoonbaseAPI
import MoonbaseCore
import MoonbaseCron
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota
import MoonbaseStore

#if canImport(Glibc)
import Glibc
#endif

/// `moonbase backup OUT`: a consistent copy of the database, made by the store while the server
/// may be running. On PostgreSQL it exits 2 pointing to `pg_dump`.
enum BackupCommand {
    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, c) = try Commands.parse(args, help: "usage: moonbase backup OUT [--data DIR]  (SQLite only: on PostgreSQL use pg_dump)") else { return 0 }
        guard let out = a.positionals.first else { throw UsageError("backup needs an output path") }
        if c.databaseURL != nil { throw UsageError(PostgresStore.backupRefusal) }
        guard FileSystem.exists(c.databasePath) else { throw ParseError.internalError("no database at \(c.databasePath)") }
        let store: any BackupStore = try SQLiteDocumentStore(path: c.databasePath)
        try store.backup(to: out)
        print("backup written to \(out)")
        return 0
    }
}
