import MoonbaseAuth
import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore
import Testing

@Suite("Sessions")
struct AuthSessionTests {
    @Test func resolveLogoutAndUnknownTokens() throws {
        let f = try AuthFixture()
        let s = try f.signUp("gus")
        let r = try #require(try f.auth.resolveSession(s.sessionToken))
        #expect(r.userId == s.userId && r.sessionId == s.sessionId)
        #expect(r.user["username"]?.stringValue == "gus")
        #expect(r.expiresAt == f.clock.nowMillis() + 365 * 24 * 3_600_000)
        #expect(try f.auth.resolveSession("r:not-a-token") == nil)
        #expect(try f.auth.resolveSession("") == nil)
        try f.auth.logOut(s.sessionToken)
        #expect(try f.auth.resolveSession(s.sessionToken) == nil)
        #expect(f.code { try f.auth.logOut(s.sessionToken) } == 209)
        #expect(f.code { _ = try f.auth.me(s.sessionToken) } == 209)
    }

    @Test func sessionsExpire() throws {
        let f = try AuthFixture { $0.sessionLifetimeMillis = 60_000 }
        let s = try f.signUp("hal")
        #expect(try f.auth.resolveSession(s.sessionToken) != nil)  // now cached
        f.clock.advance(byMillis: 59_999)
        #expect(try f.auth.resolveSession(s.sessionToken) != nil)
        f.clock.advance(byMillis: 1)
        #expect(try f.auth.resolveSession(s.sessionToken) == nil)
        #expect(try f.auth.purgeExpiredSessions() == 1)
    }

    @Test func cacheSeesWritesMadeOutsideTheService() throws {
        let f = try AuthFixture()
        let s = try f.signUp("ivy")
        #expect(try f.auth.resolveSession(s.sessionToken)?.user["mood"] == nil)
        // A profile edit through the generic store path (REST classes endpoint, Lua db.update).
        _ = try f.store.update("_User", objectId: s.userId, changes: ["mood": "happy"], identity: .master)
        #expect(try f.auth.resolveSession(s.sessionToken)?.user["mood"]?.stringValue == "happy")
        // A master-key delete of the session row through the generic path.
        try f.store.delete("_Session", objectId: s.sessionId, identity: .master)
        #expect(try f.auth.resolveSession(s.sessionToken) == nil)
    }

    @Test func deletingAUserDeletesItsSessionsWhicheverPath() throws {
        let f = try AuthFixture()
        let a = try f.signUp("jay")
        let a2 = try f.auth.logIn(username: "jay", password: "secret-pw", ip: "")
        let b = try f.signUp("kim")
        #expect(f.code { try f.auth.deleteUser(a.userId, identity: .user(b.userId)) } == 101)
        #expect(f.code { try f.auth.deleteUser(a.userId, identity: .anonymous) } == 101)
        try f.auth.deleteUser(a.userId, identity: .user(a.userId))
        #expect(try f.auth.resolveSession(a.sessionToken) == nil)
        #expect(try f.auth.resolveSession(a2.sessionToken) == nil)
        #expect(f.code { _ = try f.auth.getUser(a.userId, identity: .master) } == 101)
        // The generic store path: the store's cascade deletes the sessions too.
        try f.store.delete("_User", objectId: b.userId, identity: .master)
        #expect(try f.auth.resolveSession(b.sessionToken) == nil)
        for id in [a.sessionId, a2.sessionId, b.sessionId] {
            #expect(try f.store.fetchRaw("_Session", objectId: id) == nil, "session \(id) left behind")
        }
    }

    @Test func revokeSessionsKeepsTheExceptedOne() throws {
        let f = try AuthFixture()
        let a = try f.signUp("lou")
        let b = try f.auth.logIn(username: "lou", password: "secret-pw", ip: "")
        let c = try f.auth.logIn(username: "lou", password: "secret-pw", ip: "")
        #expect(try f.auth.revokeSessions(userId: a.userId, except: b.sessionId) == 2)
        #expect(try f.auth.resolveSession(a.sessionToken) == nil)
        #expect(try f.auth.resolveSession(b.sessionToken) != nil)
        #expect(try f.auth.resolveSession(c.sessionToken) == nil)
    }
}
