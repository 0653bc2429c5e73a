import MoonbaseAuth
import MoonbaseCore
import MoonbaseJSON
import Testing

@Suite("Profile")
struct AuthProfileTests {
    @Test func emailVisibleToSelfAndMasterOnly() throws {
        let f = try AuthFixture()
        let a = try f.signUp("nia", email: "nia@example.com")
        let b = try f.signUp("oz")
        #expect(try f.auth.getUser(a.userId, identity: .user(a.userId))["email"]?.stringValue == "nia@example.com")
        #expect(try f.auth.getUser(a.userId, identity: .master)["email"] != nil)
        let other = try f.auth.getUser(a.userId, identity: .user(b.userId))
        #expect(other["email"] == nil && other["username"]?.stringValue == "nia")
        #expect(try f.auth.getUser(a.userId, identity: .anonymous)["email"] == nil)
        #expect(f.code { _ = try f.auth.getUser("nosuchuser", identity: .master) } == 101)
    }

    @Test func onlySelfOrMasterMayWrite() throws {
        let f = try AuthFixture()
        let a = try f.signUp("pia")
        let b = try f.signUp("quinn")
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["bio": "x"], identity: .user(b.userId), currentSessionId: nil) } == 101)
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["bio": "x"], identity: .anonymous, currentSessionId: nil) } == 101)
        let r = try f.auth.updateUser(a.userId, changes: ["bio": "hello"], identity: .user(a.userId), currentSessionId: a.sessionId)
        #expect(Set(r.keys) == ["updatedAt"])
        #expect(try f.auth.getUser(a.userId, identity: .anonymous)["bio"]?.stringValue == "hello")
        _ = try f.auth.updateUser(a.userId, changes: ["bio": "by master"], identity: .master, currentSessionId: nil)
        #expect(try f.auth.getUser(a.userId, identity: .anonymous)["bio"]?.stringValue == "by master")
    }

    @Test func passwordChangeNeedsCurrentPasswordAndRevokesOtherSessions() throws {
        let f = try AuthFixture()
        let a = try f.signUp("rae", "old-pw")
        let other = try f.auth.logIn(username: "rae", password: "old-pw", ip: "")
        let me = Identity.user(a.userId)
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["password": "new-pw"], identity: me, currentSessionId: a.sessionId) } == 142)
        #expect(f.code {
            _ = try f.auth.updateUser(a.userId, changes: ["password": "new-pw", "currentPassword": "bad"], identity: me, currentSessionId: a.sessionId)
        } == 101)
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["password": ""], identity: me, currentSessionId: a.sessionId) } == 201)
        _ = try f.auth.updateUser(a.userId, changes: ["password": "new-pw", "currentPassword": "old-pw"], identity: me, currentSessionId: a.sessionId)
        #expect(try f.auth.resolveSession(a.sessionToken) != nil)
        #expect(try f.auth.resolveSession(other.sessionToken) == nil)
        #expect(f.code { _ = try f.auth.logIn(username: "rae", password: "old-pw", ip: "") } == 101)
        let again = try f.auth.logIn(username: "rae", password: "new-pw", ip: "")
        // The master key needs no current password and revokes every session.
        _ = try f.auth.updateUser(a.userId, changes: ["password": "master-pw"], identity: .master, currentSessionId: nil)
        #expect(try f.auth.resolveSession(again.sessionToken) == nil)
        #expect(try f.auth.resolveSession(a.sessionToken) == nil)
        #expect(try f.auth.verifyPassword(userId: a.userId, password: "master-pw"))
    }

    @Test func emailChangeRules() throws {
        let f = try AuthFixture()
        let a = try f.signUp("sam", "pw-sam", email: "sam@example.com")
        try f.signUp("tia", email: "tia@example.com")
        let me = Identity.user(a.userId)
        // Unchanged email is no change: no currentPassword needed.
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["email": "sam@example.com", "bio": "b"], identity: me, currentSessionId: nil) } == nil)
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["email": "sam2@example.com"], identity: me, currentSessionId: nil) } == 142)
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["email": "not-an-email", "currentPassword": "pw-sam"], identity: me, currentSessionId: nil) } == 125)
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["email": "TIA@example.com", "currentPassword": "pw-sam"], identity: me, currentSessionId: nil) } == 203)
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["email": "sam2@example.com", "currentPassword": "pw-sam"], identity: me, currentSessionId: nil) } == nil)
        #expect(try f.auth.getUser(a.userId, identity: me)["email"]?.stringValue == "sam2@example.com")
        // An email change does not revoke sessions.
        #expect(try f.auth.resolveSession(a.sessionToken) != nil)
    }

    @Test func usernameChangeRules() throws {
        let f = try AuthFixture()
        let a = try f.signUp("uma")
        try f.signUp("vic")
        let me = Identity.user(a.userId)
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["username": "vic"], identity: me, currentSessionId: nil) } == 202)
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["username": ""], identity: me, currentSessionId: nil) } == 200)
        #expect(f.code { _ = try f.auth.updateUser(a.userId, changes: ["_hashed_password": "x"], identity: me, currentSessionId: nil) } == 105)
        _ = try f.auth.updateUser(a.userId, changes: ["username": "uma2"], identity: me, currentSessionId: nil)
        #expect(try f.auth.logIn(username: "uma2", password: "secret-pw", ip: "").userId == a.userId)
    }
}
