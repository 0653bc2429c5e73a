import Foundation
import MoonbaseAuth
import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
import Testing

@Suite("Secrets at rest")
struct AuthStorageTests {
    /// Runs every flow that handles a secret, then scans every column of every table, and the
    /// raw bytes of every file in the data directory, for the plaintexts.
    @Test func noPlaintextPasswordOrTokenIsStored() throws {
        let f = try AuthFixture()
        var secrets = ["Pw-Plain-First-1", "Pw-Plain-Second-2", "Pw-Plain-Third-3"]
        let a = try f.signUp("sid", secrets[0], email: "sid@example.com")
        let login = try f.auth.logIn(username: "sid", password: secrets[0], ip: "")
        _ = try f.auth.updateUser(a.userId, changes: ["password": .string(secrets[1]), "currentPassword": .string(secrets[0])],
                                  identity: .user(a.userId), currentSessionId: a.sessionId)
        let o = f.auth.tokenGrant(form: ["grant_type": "password", "username": "sid", "password": secrets[1], "client_id": "testapp"], ip: "")
        let refresh = try #require(o.body["refresh_token"]?.stringValue)
        let o2 = f.auth.tokenGrant(form: ["grant_type": "refresh_token", "refresh_token": refresh, "client_id": "testapp"], ip: "")
        let b = try f.signUp("tom", secrets[2])
        secrets += [a.sessionToken, login.sessionToken, b.sessionToken, refresh]
        secrets += [o.body["access_token"]?.stringValue, o2.body["access_token"]?.stringValue, o2.body["refresh_token"]?.stringValue].compactMap { $0 }
        #expect(secrets.count == 10)

        let stored = try f.allStoredText()
        #expect(stored.contains { $0.1.contains("$argon2id$") }, "the hash is stored")
        for secret in secrets {
            let hits = stored.filter { $0.1.contains(secret) }.map(\.0)
            #expect(hits.isEmpty, "\(secret.prefix(6))… found in \(hits)")
            // The token part without its prefix, too.
            let core = String(secret.split(separator: ":").last ?? "")
            #expect(!stored.contains { $0.1.contains(core) })
        }
        for (name, bytes) in try f.rawFiles() {
            for secret in secrets {
                #expect(bytes.range(of: Data(secret.utf8)) == nil, "\(secret.prefix(6))… in \(name)")
            }
        }
    }

    @Test func responsesNeverCarryTheHash() throws {
        let f = try AuthFixture()
        let a = try f.signUp("uli", "pw-uli")
        let texts = [
            a.body.jsonText,
            try f.auth.logIn(username: "uli", password: "pw-uli", ip: "").body.jsonText,
            try f.auth.me(a.sessionToken).jsonText,
            try f.auth.getUser(a.userId, identity: .master).jsonText,
            try f.auth.getUser(a.userId, identity: .user(a.userId)).jsonText,
            try #require(try f.auth.resolveSession(a.sessionToken)).user.jsonText,
        ]
        for t in texts {
            #expect(!t.contains("pw-uli") && !t.contains("argon2") && !t.contains("_hashed_password") && !t.contains("\"password\""))
        }
    }

    @Test func genericWritesCannotStoreAPlaintextPassword() throws {
        let f = try AuthFixture()
        let a = try f.signUp("vera", "pw-vera")
        #expect(f.code { _ = try f.store.insert("_User", fields: ["username": "w", "password": "Plain-1"], identity: .master) } == 119)
        #expect(f.code { _ = try f.store.update("_User", objectId: a.userId, changes: ["password": "Plain-2"], identity: .master) } == 119)
        #expect(f.code { _ = try f.store.update("_User", objectId: a.userId, changes: ["bio": "ok"], identity: .master) } == nil)
        #expect(try !f.allStoredText().contains { $0.1.contains("Plain-") })
        #expect(try f.auth.verifyPassword(userId: a.userId, password: "pw-vera"))
    }
}
