import Foundation
import MoonbaseAuth
import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import MoonbaseStore

/// A real SQLite file in a temporary directory, the document store and an `AuthService` on a
/// `ManualClock`. The secrets-at-rest checks read the file itself, so this fixture (unlike the
/// service) knows the store is SQLite.
final class AuthFixture: Sendable {
    let dir: String
    let path: String
    let clock = ManualClock(millis: 1_800_000_000_000)
    let store: SQLiteDocumentStore
    var database: Database { store.database }
    let auth: AuthService

    init(_ configure: (inout AuthConfig) -> Void = { _ in }) throws {
        dir = NSTemporaryDirectory() + "mb-auth-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        path = dir + "/moonbase.sqlite"
        store = try SQLiteDocumentStore(path: path, clock: clock)
        var config = AuthConfig(appId: "testapp")
        configure(&config)
        auth = try AuthService(store: store, config: config, clock: clock)
    }

    deinit {
        database.close()
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Signs up `name` with `password` (and optional extra fields); returns the result.
    @discardableResult
    func signUp(_ name: String, _ password: String = "secret-pw", email: String? = nil,
                extra: JSONObject = [:], ip: String = "10.0.0.1") throws -> AuthResult {
        var body: JSONObject = ["username": .string(name), "password": .string(password)]
        if let email { body["email"] = .string(email) }
        for e in extra { body[e.key] = e.value }
        return try auth.signUp(body: body, ip: ip)
    }

    /// The Parse error code `body` throws, or nil when it does not throw.
    func code(_ body: () throws -> Void) -> Int? {
        do {
            try body()
            return nil
        } catch let e as ParseError {
            return e.code.rawValue
        } catch {
            return -1
        }
    }

    /// The error `body` throws, or nil.
    func error(_ body: () throws -> Void) -> ParseError? {
        do {
            try body()
            return nil
        } catch {
            return error as? ParseError
        }
    }

    /// Every text and blob value of every table, with `table.column` (after a checkpoint).
    func allStoredText() throws -> [(String, String)] {
        try database.checkpoint()
        let c = try Connection(path: path)
        defer { c.close() }
        var tables: [String] = []
        try c.query("SELECT name FROM sqlite_master WHERE type = 'table'") { s in tables.append(s.text(0) ?? "") }
        var out: [(String, String)] = []
        for t in tables {
            var columns: [String] = []
            try c.query("SELECT name FROM pragma_table_info(?)", [.text(t)]) { s in columns.append(s.text(0) ?? "") }
            for col in columns {
                let quotedTable = "\"" + t.replacingOccurrences(of: "\"", with: "\"\"") + "\""
                let quotedCol = "\"" + col.replacingOccurrences(of: "\"", with: "\"\"") + "\""
                try c.query("SELECT CAST(\(quotedCol) AS TEXT) FROM \(quotedTable)") { s in
                    if let v = s.text(0) { out.append(("\(t).\(col)", v)) }
                }
            }
        }
        return out
    }

    /// Every file in the data directory, read raw (database, WAL, shm).
    func rawFiles() throws -> [(String, Data)] {
        try FileManager.default.contentsOfDirectory(atPath: dir).map { name in
            (name, try Data(contentsOf: URL(fileURLWithPath: dir + "/" + name)))
        }
    }
}

extension JSONObject {
    var jsonText: String { JSONValue.object(self).jsonString }
}
