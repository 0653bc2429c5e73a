import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbaseRealtime
import MoonbaseSQLite
import MoonbaseStore
import Synchronization

/// A temporary store on real SQLite, for the engine's tests.
final class RealtimeFixture: @unchecked Sendable {
    // @unchecked Sendable: immutable after init; Database and the store are Sendable.
    let dir: String
    let database: Database
    let store: SQLiteDocumentStore
    let clock = ManualClock(millis: 1_790_000_000_000)

    init() throws {
        dir = NSTemporaryDirectory() + "moonbase-rt-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        database = try Database(path: dir + "/moonbase.sqlite")
        store = try SQLiteDocumentStore(database: database, clock: clock)
    }

    deinit {
        database.close()
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Object ids a REST find (master) returns for `where`.
    func findIds(_ className: String, _ w: JSONValue) throws -> Set<String> {
        let q = try FindQuery(className: className, options: ["where": w, "limit": 1000, "keys": "objectId"],
                              maxLimit: FindQuery.luaMaxLimit)
        let r = try store.find(q, identity: .master, afterFind: nil, afterFindApplies: nil)
        return Set(try r.objects().compactMap { $0["objectId"]?.stringValue })
    }
}

/// A host with fixed sessions and an optional afterFind, for hub tests.
final class TestHost: ViewerHost, @unchecked Sendable {
    let revoked = Mutex<Set<String>>([])
    let hidden = Mutex<String?>(nil)
    let store: SQLiteDocumentStore
    init(store: SQLiteDocumentStore) { self.store = store }

    func viewer(sessionToken: String) throws(ParseError) -> Viewer {
        guard !revoked.withLock({ $0.contains(sessionToken) }) else { throw ParseError(.invalidSessionToken, "Invalid session token") }
        return Viewer(identity: .user(String(sessionToken.dropFirst(2))), sessionToken: sessionToken)
    }
    func isCurrent(_ viewer: Viewer) -> Bool {
        guard let t = viewer.sessionToken else { return true }
        return !revoked.withLock { $0.contains(t) }
    }
    func roleNames(of identity: Identity) -> Set<String> { [] }
    func classPermissions(_ className: String) -> JSONObject? { store.catalog.schema(className)?.clp }
    func hasAfterFind(_ className: String) -> Bool { hidden.withLock { $0 } != nil }
    func afterFind(className: String, objects: [JSONObject], viewer: Viewer) throws(ParseError) -> [JSONObject] {
        guard let f = hidden.withLock({ $0 }) else { return objects }
        return objects.map { var o = $0; o[f] = nil; return o }
    }
}

/// Collects events; `capacity` bounds its queue like a transport's.
final class TestSink: EventSink, @unchecked Sendable {
    let events = Mutex<[LiveEvent]>([])
    let ended = Mutex<[(SubscriptionID, Int, Bool)]>([])
    let capacity: Int
    init(capacity: Int = 100_000) { self.capacity = capacity }

    func deliver(_ event: LiveEvent, subscription: SubscriptionID) -> Bool {
        events.withLock { e in
            guard e.count < capacity else { return false }
            e.append(event)
            return true
        }
    }
    func terminate(subscription: SubscriptionID, error: ParseError, reconnect: Bool) {
        ended.withLock { $0.append((subscription, error.code.rawValue, reconnect)) }
    }

    /// Waits (bounded) until `n` events arrived.
    func wait(for n: Int, seconds: Double = 10) -> [LiveEvent] {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let e = events.withLock { $0 }
            if e.count >= n { return e }
            usleep(2000)
        }
        return events.withLock { $0 }
    }
}
