import MoonbaseAuth
import MoonbaseCore
import MoonbaseJSON
import Testing

@Suite("Sign-up and login")
struct AuthSignUpTests {
    @Test func signUpReturnsParseShapeAndStoresFields() throws {
        let f = try AuthFixture()
        let r = try f.signUp("ann", "pw-ann-1", email: "Ann@Example.com", extra: ["city": "Oslo", "age": 31])
        #expect(Set(r.body.keys) == ["objectId", "createdAt", "sessionToken"])
        #expect(r.body["createdAt"]?.stringValue == ISO8601.format(millis: f.clock.nowMillis()))
        #expect(r.sessionToken.hasPrefix("r:") && r.sessionToken.utf8.count == 45)
        let me = try f.auth.me(r.sessionToken)
        #expect(me["username"]?.stringValue == "ann")
        #expect(me["email"]?.stringValue == "Ann@Example.com")
        #expect(me["city"]?.stringValue == "Oslo")
        #expect(me["age"]?.intValue == 31)
        #expect(me["sessionToken"]?.stringValue == r.sessionToken)
        #expect(me["ACL"] == ["*": ["read": true], .init(stringLiteral: r.userId): ["read": true, "write": true]])
        let text = me.jsonText
        #expect(!text.contains("pw-ann-1") && !text.contains("password") && !text.contains("argon2"))
    }

    @Test func signUpErrors() throws {
        let f = try AuthFixture()
        #expect(f.code { _ = try f.auth.signUp(body: ["password": "x"], ip: "") } == 200)
        #expect(f.code { _ = try f.auth.signUp(body: ["username": "", "password": "x"], ip: "") } == 200)
        #expect(f.code { _ = try f.auth.signUp(body: ["username": 5, "password": "x"], ip: "") } == 200)
        #expect(f.code { _ = try f.auth.signUp(body: ["username": "bob"], ip: "") } == 201)
        #expect(f.code { _ = try f.auth.signUp(body: ["username": "bob", "password": ""], ip: "") } == 201)
        for bad in ["nope", "a@b", "@b.com", "a b@c.com", "a@b..com", "a@@b.com"] {
            #expect(f.code { try f.signUp("bob", email: bad) } == 125, "\(bad)")
        }
        #expect(f.code { try f.signUp("bob", extra: ["bad-name": 1]) } == 105)
        #expect(f.code { try f.signUp("bob", extra: ["_hashed_password": "x"]) } == 105)
        #expect(f.code { try f.signUp("bob", extra: ["_other": "x"]) } == 105)
    }

    @Test func takenUsernameAndEmail() throws {
        let f = try AuthFixture()
        try f.signUp("carol", email: "carol@example.com")
        #expect(f.code { try f.signUp("carol") } == 202)
        #expect(f.code { try f.signUp("carol2", email: "CAROL@example.COM") } == 203)
        #expect(f.code { try f.signUp("carol3", email: "carol3@example.com") } == nil)
    }

    @Test func logInByUsernameOrEmail() throws {
        let f = try AuthFixture()
        let s = try f.signUp("dave", "pw-dave", email: "dave@example.com")
        let a = try f.auth.logIn(username: "dave", password: "pw-dave", ip: "1.2.3.4")
        #expect(a.userId == s.userId && a.sessionToken != s.sessionToken)
        #expect(a.body["username"]?.stringValue == "dave")
        #expect(a.body["email"]?.stringValue == "dave@example.com")
        #expect(a.body["sessionToken"]?.stringValue == a.sessionToken)
        #expect(!a.body.jsonText.contains("pw-dave") && !a.body.jsonText.contains("_hashed"))
        let b = try f.auth.logIn(username: "DAVE@example.com", password: "pw-dave", ip: "1.2.3.4")
        #expect(b.userId == s.userId)
        let c = try f.auth.logIn(username: nil, email: "dave@EXAMPLE.com", password: "pw-dave", ip: "1.2.3.4")
        #expect(c.userId == s.userId)
        #expect(try f.auth.resolveSession(c.sessionToken)?.userId == s.userId)
    }

    @Test func wrongCredentialsAre101() throws {
        let f = try AuthFixture()
        try f.signUp("erin", "right")
        let e = f.error { _ = try f.auth.logIn(username: "erin", password: "wrong", ip: "") }
        #expect(e?.code == .objectNotFound && e?.message == "Invalid username/password.")
        #expect(f.code { _ = try f.auth.logIn(username: "nobody", password: "right", ip: "") } == 101)
        #expect(f.code { _ = try f.auth.logIn(username: "", password: "right", ip: "") } == 200)
        #expect(f.code { _ = try f.auth.logIn(username: "erin", password: nil, ip: "") } == 201)
    }

    @Test func verifyPasswordForLua() throws {
        let f = try AuthFixture()
        let s = try f.signUp("fay", "pw-fay")
        #expect(try f.auth.verifyPassword(userId: s.userId, password: "pw-fay"))
        #expect(try !f.auth.verifyPassword(userId: s.userId, password: "nope"))
        #expect(try !f.auth.verifyPassword(userId: "missing123", password: "pw-fay"))
    }
}
