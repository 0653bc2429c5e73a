import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import MoonbaseStore
import Testing

/// AccountStore's lookups and writes and JobHistoryStore on PostgreSQL. They build on the
/// document part of the store: in a build where `PostgresStore` does not implement
/// `DocumentStore` yet, each refuses with a message saying so (and writes nothing).
extension PostgresSuite {
    @Suite struct PostgresAccountStoreTests {
        static func pointer(_ id: String) -> JSONValue {
            .object(["__type": "Pointer", "className": "_User", "objectId": .string(id)])
        }

        static func date(_ ms: Int64) -> JSONValue {
            .object(["__type": "Date", "iso": .string(ISO8601.format(millis: ms))])
        }

        /// This build's store as a DocumentStore, or nil (then the methods must refuse).
        static func documents(_ s: PostgresStore) -> (any DocumentStore)? {
            (s as Any) as? any DocumentStore
        }

        @Test func usersAndSessionsByTheirKeys() throws {
            let s = try PostgresStore(url: freshDatabaseURL())
            guard let docs = Self.documents(s) else {
                let e = #expect(throws: ParseError.self) { try s.prepareAccounts() }
                #expect(e?.message.contains("DocumentStore") == true)
                #expect(throws: ParseError.self) { try s.insertUser(fields: ["username": "ann"], acl: nil) }
                #expect(throws: ParseError.self) { try s.deleteSessions(userId: "u", except: nil) }
                return
            }
            try s.prepareAccounts()
            try s.prepareAccounts()   // idempotent
            let ann = try s.insertUser(fields: ["username": "ann", "email": "Ann@Example.com", "_hashed_password": "h1"], acl: nil)
            let bob = try s.insertUser(fields: ["username": "bob"], acl: nil)
            #expect(try s.user(username: "ann")?.objectId == ann.objectId)
            #expect(try s.user(username: "Ann") == nil)
            #expect(try s.user(email: "ann@example.COM")?.objectId == ann.objectId)
            #expect(try s.user(email: "nobody@example.com") == nil)
            let plain = #expect(throws: ParseError.self) { try s.insertUser(fields: ["username": "cy", "password": "x"], acl: nil) }
            #expect(plain?.code == .operationForbidden)
            let taken = #expect(throws: ParseError.self) { try s.insertUser(fields: ["username": "ann"], acl: nil) }
            #expect(taken?.code == .duplicateValue)
            let epoch = try s.authEpoch()
            _ = try s.updateUser(ann.objectId, changes: ["_hashed_password": "h2"], identity: .master)
            #expect(try s.authEpoch() > epoch)

            let now: Int64 = 1_800_000_000_000
            func session(_ user: String, _ token: String, expires: Int64, refresh: Int64? = nil) throws(ParseError) -> String {
                var f: JSONObject = ["user": Self.pointer(user), "sessionTokenHash": .string(token), "expiresAt": Self.date(expires)]
                if let refresh {
                    f["refreshTokenHash"] = .string("r" + token)
                    f["refreshExpiresAt"] = Self.date(refresh)
                }
                return try docs.insert("_Session", fields: f, acl: nil, identity: .master).objectId
            }
            let keep = try session(ann.objectId, "t1", expires: now + 1_000)
            _ = try session(ann.objectId, "t2", expires: now + 1_000)
            _ = try session(bob.objectId, "t3", expires: now - 1_000)
            let refreshable = try session(bob.objectId, "t4", expires: now - 1_000, refresh: now + 5_000)
            #expect(try s.session(tokenHash: "t1")?.objectId == keep)
            #expect(try s.session(refreshTokenHash: "rt4")?.objectId == refreshable)
            #expect(try s.session(tokenHash: "nope") == nil)
            #expect(try s.deleteSessions(userId: ann.objectId, except: keep) == 1)
            #expect(try s.session(tokenHash: "t2") == nil)
            #expect(try s.deleteExpiredSessions(now: now) == 1)   // t3; t4's refresh token lives on
            #expect(try s.session(tokenHash: "t4")?.objectId == refreshable)
            try docs.delete("_User", objectId: ann.objectId, identity: .master)
            #expect(try s.session(tokenHash: "t1") == nil)
        }

        @Test func jobRunsUpdateOnlyWhileRunningAndPruneToTheNewest() throws {
            let s = try PostgresStore(url: freshDatabaseURL())
            guard let docs = Self.documents(s) else {
                let e = #expect(throws: ParseError.self) { try s.updateRunningJobRuns(changes: ["status": "failed"]) }
                #expect(e?.message.contains("DocumentStore") == true)
                return
            }
            #expect(try s.updateRunningJobRuns(changes: ["status": "failed"]) == 0)   // no class yet
            try s.pruneJobHistory(job: "j", keep: 1)
            var ids: [String] = []
            for (i, status) in ["succeeded", "failed", "succeeded", "running"].enumerated() {
                ids.append(try docs.insert("_JobStatus", fields: ["jobName": "j", "status": .string(status), "n": .int(Int64(i))],
                                           acl: nil, identity: .master).objectId)
                usleep(2_000)   // distinct creation times
            }
            #expect(try !s.updateRunningJobRun(ids[0], changes: ["message": "late"]))
            #expect(try s.updateRunningJobRun(ids[3], changes: ["progress": "half"]))
            try s.pruneJobHistory(job: "j", keep: 2)
            // The newest two stay (one of them running); older finished runs go.
            #expect(try docs.fetchRaw("_JobStatus", objectId: ids[0]) == nil)
            #expect(try docs.fetchRaw("_JobStatus", objectId: ids[1]) == nil)
            #expect(try docs.fetchRaw("_JobStatus", objectId: ids[2]) != nil)
            #expect(try s.updateRunningJobRuns(changes: ["status": "failed"]) == 1)
            #expect(try !s.updateRunningJobRun(ids[3], changes: ["progress": "after"]))
        }
    }
}
