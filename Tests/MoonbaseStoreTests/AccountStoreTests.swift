import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbaseQuota
import MoonbaseSQLite
import Testing

@testable import MoonbaseStore

/// The SQLite `AccountStore`: its lookups use the indexes, session clean-up deletes exactly
/// what it should, and login-failure windows survive a reopen.
@Suite(.timeLimit(.minutes(1)))
struct AccountStoreTests {
    static func date(_ ms: Int64) -> JSONValue { ["__type": "Date", "iso": .string(ISO8601.format(millis: ms))] }

    func session(_ f: StorageFixture, user: String, expires: Int64, refreshExpires: Int64? = nil) throws -> String {
        var fields: JSONObject = [
            "user": ["__type": "Pointer", "className": "_User", "objectId": .string(user)],
            "sessionTokenHash": .string(UUID().uuidString), "expiresAt": Self.date(expires),
        ]
        if let refreshExpires { fields["refreshExpiresAt"] = Self.date(refreshExpires) }
        return try f.store.insert("_Session", fields: fields, acl: nil, identity: .master).objectId
    }

    @Test func lookupsUseTheIndexes() throws {
        let f = try StorageFixture()
        try f.store.prepareAccounts()
        let u = try f.store.insertUser(fields: ["username": "max", "email": "Max@Example.com", "_hashed_password": "h"], acl: nil)
        // The per-user index becomes type-aware (Pointer → objectId) with the first session.
        _ = try session(f, user: u.objectId, expires: f.clock.nowMillis() + 1000)
        #expect(try f.store.user(username: "max")?.objectId == u.objectId)
        #expect(try f.store.user(email: "max@example.COM")?.objectId == u.objectId)
        // A fresh connection: EXPLAIN does not re-read a schema changed by another connection.
        let c = try Connection(path: f.dir + "/moonbase.sqlite")
        defer { c.close() }
        var plan: [String] = []
        for sql in [
            SQLiteDocumentStore.userByUsernameSQL, SQLiteDocumentStore.userByEmailSQL,
            SQLiteDocumentStore.sessionByTokenSQL, SQLiteDocumentStore.sessionByRefreshSQL,
            "DELETE FROM \"_Session\" WHERE " + SQLiteDocumentStore.sessionsOfUserFilter,
        ] {
            try c.query("EXPLAIN QUERY PLAN " + sql, [.text("x")]) { s in plan.append(s.text(3) ?? "") }
        }
        #expect(plan.count == 5 && plan.allSatisfy { $0.contains("USING INDEX") }, "\(plan)")
    }

    @Test func expiredSessionsAndOneUsersSessionsAreDeleted() throws {
        let f = try StorageFixture()
        try f.store.prepareAccounts()
        let now = f.clock.nowMillis()
        let expired = try session(f, user: "u1", expires: now - 1)
        let refreshable = try session(f, user: "u1", expires: now - 1, refreshExpires: now + 60_000)
        let live = try session(f, user: "u2", expires: now + 60_000)
        let keep = try session(f, user: "u2", expires: now + 60_000)
        let epoch = try f.store.authEpoch()
        #expect(try f.store.deleteExpiredSessions(now: now) == 1)
        #expect(try f.store.fetchRaw("_Session", objectId: expired) == nil)
        #expect(try f.store.fetchRaw("_Session", objectId: refreshable) != nil)
        #expect(try f.store.deleteSessions(userId: "u2", except: keep) == 1)
        #expect(try f.store.fetchRaw("_Session", objectId: live) == nil)
        #expect(try f.store.fetchRaw("_Session", objectId: keep) != nil)
        #expect(try f.store.authEpoch() == epoch + 2, "each deleted session bumps the epoch")
    }

    @Test func loginFailureWindowsAreSavedAndClosedOnesForgotten() throws {
        let f = try StorageFixture()
        try f.store.saveLoginFailures([LoginFailureWindow(key: "ip:a", start: 100, failures: 2),
                                       LoginFailureWindow(key: "user:b", start: 500, failures: 4),
                                       LoginFailureWindow(key: "name:c", start: 600, failures: 1)], removed: [])
        try f.store.saveLoginFailures([LoginFailureWindow(key: "user:b", start: 500, failures: 5)], removed: ["name:c"])
        let reopened = try SQLiteDocumentStore(path: f.dir + "/moonbase.sqlite")
        #expect(try reopened.loginFailureWindows(closedAtOrBefore: 100) == [LoginFailureWindow(key: "user:b", start: 500, failures: 5)])
        #expect(try f.store.loginFailureWindows(closedAtOrBefore: 0).map(\.key) == ["user:b"], "the closed window was deleted")
    }
}

/// The SQLite side of what several hosts share on PostgreSQL: failed logins are counted by one
/// atomic upsert per key (the same statement), and a flush reads no shared total (one host).
@Suite(.timeLimit(.minutes(1)))
struct SQLiteSharedCountsTests {
    @Test func failedLoginsAreCountedAndWindowsRestart() throws {
        let f = try StorageFixture()
        let now: Int64 = 1_800_000_000_000, window: Int64 = 900_000
        for _ in 0..<2 { _ = try f.store.recordLoginFailure(keys: ["user:u", "ip:a"], now: now, windowMillis: window) }
        let third = try f.store.recordLoginFailure(keys: ["ip:a", "user:u"], now: now + 5, windowMillis: window)
        #expect(third == [LoginFailureWindow(key: "ip:a", start: now, failures: 3), LoginFailureWindow(key: "user:u", start: now, failures: 3)])
        #expect(try f.store.loginFailures(keys: ["user:u", "name:z"], now: now + 6, windowMillis: window)
                == [LoginFailureWindow(key: "user:u", start: now, failures: 3)])
        #expect(try f.store.loginFailures(keys: ["user:u"], now: now + window, windowMillis: window).isEmpty)
        #expect(try f.store.recordLoginFailure(keys: ["user:u"], now: now + window, windowMillis: window)
                == [LoginFailureWindow(key: "user:u", start: now + window, failures: 1)])
    }

    @Test func aFlushOnOneHostReadsNoSharedTotal() throws {
        let f = try StorageFixture()
        let hour: Int64 = 1_795_000_000_000 - 1_795_000_000_000 % 3_600_000
        let batch = UsageBatch(rows: [UsageRow(bucket: UsageBucket(kind: .account, key: "app", hour: hour), counts: UsageCounts(units: 2))],
                               windows: [], pruneWindowsBefore: 0)
        #expect(try f.store.writeReadingShared(batch, monthStart: hour - 3_600_000, monthEnd: hour + 3_600_000, minute: hour) == nil)
        let totals = try f.store.loadTotals(monthStart: hour - 3_600_000, monthEnd: hour + 3_600_000, minute: hour)
        #expect(totals.appMonthUnits == 2, "the batch was still written")
        #expect(!f.store.isSharedByHosts)
    }
}
