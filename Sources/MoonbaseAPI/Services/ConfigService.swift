import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore
import Synchronization

/// Parse's Config: app-wide parameters read by clients (`GET /parse/config`), written with the
/// master key (`PUT /parse/config`), read by Cloud Code (`config.get(name)`).
///
/// Stored by the store (`ConfigStore`: one entry per parameter, its JSON value and whether only
/// the master key may read it), cached in memory and dropped from the cache on every write, this
/// host's or (told by the store) another host's. A read that overlapped a drop does not cache
/// what it read: it may predate the change.
///
/// Thread-safety: the cache is behind a mutex; writes go through the store.
public final class ConfigService: Sendable {
    struct Snapshot: Sendable {
        var params: JSONObject
        var masterKeyOnly: Set<String>
    }

    let store: any ConfigStore
    let cache = Mutex<(generation: UInt64, snapshot: Snapshot?)>((0, nil))

    public init(store: any ConfigStore) {
        self.store = store
        store.observeConfigChanges { [weak self] in self?.dropCache() }
    }

    func dropCache() { cache.withLock { c in c = (c.generation &+ 1, nil) } }

    func snapshot() throws(ParseError) -> Snapshot {
        let (generation, cached) = cache.withLock { $0 }
        if let s = cached { return s }
        var snap = Snapshot(params: [:], masterKeyOnly: [])
        for p in try store.configParameters() {
            snap.params[p.name] = p.value
            if p.masterKeyOnly { snap.masterKeyOnly.insert(p.name) }
        }
        cache.withLock { c in if c.generation == generation { c.snapshot = snap } }
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
        var changes: [ConfigChange] = []
        for e in params {
            changes.append(e.value.objectValue?["__op"]?.stringValue == "Delete" ? .remove(e.key) : .set(e.key, e.value))
        }
        for e in masterKeyOnly where params[e.key]?.objectValue?["__op"]?.stringValue != "Delete" {
            changes.append(.masterKeyOnly(e.key, e.value.boolValue == true))
        }
        defer { dropCache() }
        try store.updateConfig(changes)
    }
}
