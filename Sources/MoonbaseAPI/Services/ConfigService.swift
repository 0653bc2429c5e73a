import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Synchronization

/// Parse's Config: app-wide parameters read by clients (`GET /parse/config`), written with the
/// master key (`PUT /parse/config`), read by Cloud Code (`config.get(name)`).
///
/// Stored in `_mb_config` (one row per parameter, its JSON value and whether only the master key
/// may read it), cached in memory and dropped from the cache on every write.
///
/// Thread-safety: the cache is behind a mutex; writes go through the database's writer.
public final class ConfigService: Sendable {
    struct Snapshot: Sendable {
        var params: JSONObject
        var masterKeyOnly: Set<String>
    }

    let database: Database
    let cache = Mutex<Snapshot?>(nil)
    let tableReady = Atomic<Bool>(false)

    public init(database: Database) { self.database = database }

    func ensureTable() throws(ParseError) {
        if tableReady.load(ordering: .acquiring) { return }
        try database.write { (tx) throws(ParseError) in
            try tx.connection.execute("""
                CREATE TABLE IF NOT EXISTS _mb_config(name TEXT PRIMARY KEY, value TEXT NOT NULL,
                  masterKeyOnly INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID
                """)
        }
        tableReady.store(true, ordering: .releasing)
    }

    func snapshot() throws(ParseError) -> Snapshot {
        if let s = cache.withLock({ $0 }) { return s }
        try ensureTable()
        var snap = Snapshot(params: [:], masterKeyOnly: [])
        try database.read { (c) throws(ParseError) in
            try c.query("SELECT name, value, masterKeyOnly FROM _mb_config ORDER BY name") { (st) throws(ParseError) in
                guard let name = st.text(0), let text = st.text(1) else { return }
                snap.params[name] = try JSON.parse(text)
                if st.int64(2) != 0 { snap.masterKeyOnly.insert(name) }
            }
        }
        cache.withLock { $0 = snap }
        return snap
    }

    /// The parameters a caller may read: all of them for the master key (and Cloud Code).
    public func params(master: Bool) throws(ParseError) -> JSONObject {
        let s = try snapshot()
        if master { return s.params }
        var out = JSONObject()
        for e in s.params where !s.masterKeyOnly.contains(e.key) { out[e.key] = e.value }
        return out
    }

    /// `{name: true}` for the master-only parameters.
    public func masterKeyOnly() throws(ParseError) -> JSONObject {
        var out = JSONObject()
        for name in try snapshot().masterKeyOnly.sorted() { out[name] = .bool(true) }
        return out
    }

    /// One parameter as Cloud Code sees it (master-only ones included); nil when unset.
    public func get(_ name: String) throws(ParseError) -> JSONValue? { try snapshot().params[name] }

    /// Parse Server's merge: each listed parameter is set (or removed by `{"__op":"Delete"}`);
    /// `masterKeyOnly` sets or clears the flag of the parameters it names. Others are untouched.
    /// - Throws: 107 for a body that is not of that shape; 105 for an empty or over-long name.
    public func update(params: JSONObject, masterKeyOnly: JSONObject) throws(ParseError) {
        for name in params.map(\.key) + masterKeyOnly.map(\.key) where name.isEmpty || name.utf8.count > 256 {
            throw ParseError(.invalidKeyName, "invalid config parameter name")
        }
        for e in masterKeyOnly where e.value.boolValue == nil {
            throw ParseError(.invalidJSON, "masterKeyOnly.\(e.key) must be a boolean")
        }
        try ensureTable()
        defer { cache.withLock { $0 = nil } }
        try database.write { (tx) throws(ParseError) in
            for e in params {
                if e.value.objectValue?["__op"]?.stringValue == "Delete" {
                    _ = try tx.connection.run("DELETE FROM _mb_config WHERE name = ?", [.text(e.key)])
                    continue
                }
                _ = try tx.connection.run("""
                    INSERT INTO _mb_config(name, value) VALUES (?, ?)
                    ON CONFLICT(name) DO UPDATE SET value = excluded.value
                    """, [.text(e.key), .text(e.value.jsonString)])
            }
            for e in masterKeyOnly where params[e.key]?.objectValue?["__op"]?.stringValue != "Delete" {
                _ = try tx.connection.run("UPDATE _mb_config SET masterKeyOnly = ? WHERE name = ?",
                                          [.integer(e.value.boolValue == true ? 1 : 0), .text(e.key)])
            }
        }
    }
}
