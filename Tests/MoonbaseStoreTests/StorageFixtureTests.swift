import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
@testable import MoonbaseStore

/// A fresh database in its own temporary directory, removed when the fixture goes away.
final class StorageFixture: @unchecked Sendable {
    // @unchecked Sendable: all stored properties are immutable after init; Database and the
    // store are Sendable themselves and the clock is atomic.
    let dir: String
    let database: Database
    let store: SQLiteDocumentStore
    let clock = ManualClock(millis: 1_790_000_000_000)

    init() throws {
        dir = NSTemporaryDirectory() + "moonbase-storea-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        database = try Database(path: dir + "/moonbase.sqlite")
        store = try SQLiteDocumentStore(database: database, clock: clock)
    }

    deinit {
        database.close()
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Parses a JSON object literal written as text.
    static func obj(_ text: String) throws -> JSONObject {
        try JSON.parse(text).objectValue!
    }

    /// The stored object as a client would see it.
    func json(_ o: StoredObject, _ viewer: Identity = .master) throws -> JSONObject {
        try o.json(for: viewer)
    }

    /// `EXPLAIN QUERY PLAN` details for `sql`.
    func plan(_ sql: String, _ binds: [SQLiteValue] = []) throws -> String {
        var lines: [String] = []
        try database.read { (c) throws(ParseError) in
            try c.query("EXPLAIN QUERY PLAN " + sql, binds) { (row) throws(ParseError) in lines.append(row.text(3) ?? "") }
        }
        return lines.joined(separator: "\n")
    }
}

/// Runs `body` on `n` threads at once and waits for all of them.
func runConcurrently(_ n: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for i in 0..<n {
        group.enter()
        Thread.detachNewThread {
            body(i)
            group.leave()
        }
    }
    group.wait()
}

extension ParseError {
    var codeValue: Int { code.rawValue }
}

/// The Parse code a throwing expression fails with, or nil when it succeeds.
func parseCode<T>(_ body: () throws -> T) -> Int? {
    do {
        _ = try body()
        return nil
    } catch let e as ParseError {
        return e.code.rawValue
    } catch {
        return -1
    }
}
