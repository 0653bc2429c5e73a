import MoonbaseAPI
import MoonbaseCore
import MoonbaseStore

/// `moonbase migrate --to URL`: copies the SQLite database of the data dir into an empty
/// PostgreSQL database (`SQLiteToPostgres`). Progress goes to stderr, the per-table summary to
/// stdout. Exit 0 when copied, 3 when the target is not empty (nothing written), 1 on failure
/// (nothing kept in the target), 2 on misuse.
enum MigrateCommand {
    static let help = """
        usage: moonbase migrate --to postgres://… [--data DIR]
          Copies the SQLite database in DIR (./data) into an EMPTY PostgreSQL database: every class
          (schema, indexes, permissions), object, user, session, role, file record, Config value,
          job run, usage row and mail token. Stop the server first: the copy is a snapshot taken
          when it starts. The files' bytes stay in DIR/files, which the PostgreSQL hosts use.
          Exit 3 when the target database is not empty.
        """

    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, c) = try Commands.parse(args, values: ["to"], help: help) else { return 0 }
        guard let raw = a.value("to") else { throw UsageError("migrate needs --to postgres://… (the empty target database)") }
        let url = try HostConfig.databaseURL(raw, from: "--to")
        // The source is always the data dir's SQLite file; a --database here would be ambiguous.
        if a.value("database") != nil { throw UsageError("migrate copies from --data's SQLite file to --to; --database is not used") }
        let path = c.databasePath
        guard FileSystem.exists(path) else { throw ParseError(.internalError, "no SQLite database at \(path)") }
        // SQLite removes the write-ahead log when the last connection closes cleanly.
        if FileSystem.exists(path + "-wal") {
            printErr("moonbase migrate: warning: \(path)-wal exists: a server may still be running on \(c.dataDir) (or did not stop cleanly); writes after the copy's snapshot are not copied")
        }
        if let why = try SQLiteToPostgres.nonEmptyReason(url: url) {
            printErr("moonbase migrate: the target database is not empty (\(why)); nothing was copied. Migrate into a new, empty database (e.g. createdb --locale=C --template=template0 NAME)")
            return 3
        }
        let source = try SQLiteDocumentStore(path: path)
        let target = try PostgresStore(url: url)
        let summary: SQLiteToPostgres.Summary
        do throws(ParseError) {
            summary = try SQLiteToPostgres(source: source, target: target).run { printErr("migrate: " + $0) }
        } catch {
            // 108: another copy (or a host) wrote to the target after the check above.
            guard error.code == .commandUnavailable else { throw error }
            printErr("moonbase migrate: \(error.message); nothing was copied")
            return 3
        }
        source.close()
        let width = max(12, summary.tables.map(\.name.count).max() ?? 0)
        print("table".padded(width) + "rows")
        for t in summary.tables { print(t.name.padded(width) + String(t.rows)) }
        print("copied \(summary.totalRows) rows in \((summary.seconds * 100).rounded() / 100) s (\(summary.rowsPerSecond) rows/s)")
        return 0
    }
}
