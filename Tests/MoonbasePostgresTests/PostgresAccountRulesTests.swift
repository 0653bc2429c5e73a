import Foundation
import MoonbaseCore
import MoonbasePostgres
import MoonbaseStore
import Testing

/// The accounts' rules PostgreSQL keeps by itself (auth epoch, session cascade, no plaintext
/// password, unique lower-cased email) and the saved login-failure windows, exercised with plain
/// SQL on the class tables: they must hold whichever path writes the rows.
extension PostgresSuite {
    @Suite struct PostgresAccountRulesTests {
        static func store() throws -> PostgresStore {
            let s = try PostgresStore(url: freshDatabaseURL())
            try s.installAccountRules()
            return s
        }

        static func exec(_ s: PostgresStore, _ sql: String, _ params: [PGValue] = []) throws(ParseError) {
            try s.pool.withConnection { (c) throws(ParseError) in _ = try c.execute(sql, params) }
        }

        static func addUser(_ s: PostgresStore, _ id: String, _ data: String) throws(ParseError) {
            try exec(s, "INSERT INTO \"_User\"(objectId, createdAt, updatedAt, data) VALUES ($1, 1, 1, $2)",
                     [.text(id), .json(Array(data.utf8))])
        }

        static func addSession(_ s: PostgresStore, _ id: String, user: String) throws(ParseError) {
            let data = #"{"user":{"__type":"Pointer","className":"_User","objectId":"\#(user)"},"sessionTokenHash":"h\#(id)"}"#
            try exec(s, "INSERT INTO \"_Session\"(objectId, createdAt, updatedAt, data) VALUES ($1, 1, 1, $2)",
                     [.text(id), .json(Array(data.utf8))])
        }

        static func sessionIds(_ s: PostgresStore) throws(ParseError) -> [String] {
            try s.pool.withConnection { (c) throws(ParseError) in
                try c.execute("SELECT objectId FROM \"_Session\" ORDER BY objectId").rows.compactMap { $0[0].string }
            }
        }

        @Test func theEpochGrowsOnEveryUserOrSessionChangeAndDeletingAUserDeletesTheirSessions() throws {
            let s = try Self.store()
            try s.installAccountRules()   // idempotent
            #expect(try s.authEpoch() == 0)
            try Self.addUser(s, "u1", #"{"username":"ann"}"#)
            try Self.addUser(s, "u2", #"{"username":"bob"}"#)
            try Self.addSession(s, "s1", user: "u1")
            try Self.addSession(s, "s2", user: "u1")
            try Self.addSession(s, "s3", user: "u2")
            #expect(try s.authEpoch() == 0)   // creating rows changes no cached answer
            try Self.exec(s, #"UPDATE "_User" SET data = data || '{"name":"Ann"}' WHERE objectId = 'u1'"#)
            let e1 = try s.authEpoch()
            #expect(e1 > 0)
            try Self.exec(s, #"UPDATE "_Session" SET updatedAt = 2 WHERE objectId = 's3'"#)
            let e2 = try s.authEpoch()
            #expect(e2 > e1)
            try Self.exec(s, #"DELETE FROM "_User" WHERE objectId = 'u1'"#)
            #expect(try Self.sessionIds(s) == ["s3"])
            #expect(try s.authEpoch() > e2)
        }

        /// A reader sees the new epoch exactly when it can see the change that bumped it.
        @Test func theEpochOfAnUncommittedChangeIsInvisible() throws {
            let s = try Self.store()
            try Self.addUser(s, "u1", #"{"username":"ann"}"#)
            let before = try s.authEpoch()
            let other = try PGConnection(url: s.url)
            defer { other.close() }
            try other.execute("BEGIN")
            try other.execute(#"UPDATE "_User" SET data = data || '{"x":1}' WHERE objectId = 'u1'"#)
            #expect(try s.authEpoch() == before)
            try other.execute("COMMIT")
            #expect(try s.authEpoch() > before)
        }

        @Test func aUserRowNeverHoldsAPlaintextPassword() throws {
            let s = try Self.store()
            let e = #expect(throws: ParseError.self) { try Self.addUser(s, "u1", #"{"username":"ann","password":"hunter2"}"#) }
            #expect(e?.code == .operationForbidden)
            #expect(e?.message.contains("hashed") == true)
            try Self.addUser(s, "u1", #"{"username":"ann","password":null}"#)
            let u = #expect(throws: ParseError.self) {
                try Self.exec(s, #"UPDATE "_User" SET data = data || '{"password":"x"}' WHERE objectId = 'u1'"#)
            }
            #expect(u?.code == .operationForbidden)
        }

        @Test func emailsAreUniqueWhateverTheirCase() throws {
            let s = try Self.store()
            try Self.addUser(s, "u1", #"{"username":"ann","email":"Ann@Example.com"}"#)
            let e = #expect(throws: ParseError.self) { try Self.addUser(s, "u2", #"{"username":"bob","email":"ann@example.COM"}"#) }
            #expect(e?.code == .duplicateValue)
            try Self.addUser(s, "u3", #"{"username":"cy"}"#)
            try Self.addUser(s, "u4", #"{"username":"di"}"#)   // no email twice is fine
        }

        @Test func loginFailureWindowsAreSavedReplacedAndForgotten() throws {
            let s = try Self.store()
            try s.saveLoginFailures([LoginFailureWindow(key: "ip:1", start: 100, failures: 2),
                                     LoginFailureWindow(key: "user:a", start: 500, failures: 1)], removed: [])
            try s.saveLoginFailures([LoginFailureWindow(key: "user:a", start: 500, failures: 4)], removed: ["nothing"])
            #expect(try s.loginFailureWindows(closedAtOrBefore: 0) == [
                LoginFailureWindow(key: "ip:1", start: 100, failures: 2), LoginFailureWindow(key: "user:a", start: 500, failures: 4)])
            // Windows that closed are dropped for good; removed keys go.
            #expect(try s.loginFailureWindows(closedAtOrBefore: 100) == [LoginFailureWindow(key: "user:a", start: 500, failures: 4)])
            try s.saveLoginFailures([], removed: ["user:a"])
            #expect(try s.loginFailureWindows(closedAtOrBefore: 0) == [])
        }
    }
}
