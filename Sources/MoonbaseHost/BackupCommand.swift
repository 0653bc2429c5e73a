import MoonbaseAPI
import MoonbaseCore
import MoonbaseCron
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota
import MoonbaseSQLite

#if canImport(Glibc)
import Glibc
#endif

/// `moonbase backup OUT`: SQLite online backup.
enum BackupCommand {
    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, c) = try Commands.parse(args, help: "usage: moonbase backup OUT [--data DIR]") else { return 0 }
        guard let out = a.positionals.first else { throw UsageError("backup needs an output path") }
        guard FileSystem.exists(c.databasePath) else { throw ParseError.internalError("no database at \(c.databasePath)") }
        let db = try Database(path: c.databasePath)
        try db.backup(to: out)
        db.close()
        print("backup written to \(out)")
        return 0
    }
}
