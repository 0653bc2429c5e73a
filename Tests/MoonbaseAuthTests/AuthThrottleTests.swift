import MoonbaseAuth
import MoonbaseCore
import Testing

@Suite("Login throttling")
struct AuthThrottleTests {
    @Test func accountLockedAfterLimitThenWindowPasses() throws {
        let f = try AuthFixture { $0.loginMaxFailures = 3 }
        try f.signUp("wes", "right")
        for i in 0..<3 {
            #expect(f.code { _ = try f.auth.logIn(username: "wes", password: "wrong", ip: "10.0.0.\(i)") } == 101)
        }
        // The attempt after the limit is refused, even with the right password, from any IP.
        let e = try #require(f.error { _ = try f.auth.logIn(username: "wes", password: "right", ip: "10.9.9.9") })
        #expect(e.code == .requestLimitExceeded && e.httpStatus == 429)
        #expect(e.headers.first { $0.0 == "Retry-After" }?.1 == "900")
        f.clock.advance(byMillis: 600_000)
        let later = f.error { _ = try f.auth.logIn(username: "wes", password: "right", ip: "10.9.9.9") }
        #expect(later?.headers.first { $0.0 == "Retry-After" }?.1 == "300")
        f.clock.advance(byMillis: 300_000)
        #expect(try f.auth.logIn(username: "wes", password: "right", ip: "10.9.9.9").body["username"] == "wes")
    }

    @Test func ipLockedAcrossAccounts() throws {
        let f = try AuthFixture { $0.loginMaxFailures = 2 }
        try f.signUp("xia", "right")
        #expect(f.code { _ = try f.auth.logIn(username: "nobody1", password: "x", ip: "6.6.6.6") } == 101)
        #expect(f.code { _ = try f.auth.logIn(username: "nobody2", password: "x", ip: "6.6.6.6") } == 101)
        #expect(f.code { _ = try f.auth.logIn(username: "xia", password: "right", ip: "6.6.6.6") } == 155)
        #expect(f.code { _ = try f.auth.logIn(username: "xia", password: "right", ip: "7.7.7.7") } == nil)
    }

    @Test func successResetsTheAccountCount() throws {
        let f = try AuthFixture { $0.loginMaxFailures = 3 }
        let s = try f.signUp("yan", "right")
        for _ in 0..<2 { _ = f.code { _ = try f.auth.logIn(username: "yan", password: "bad", ip: "") } }
        #expect(f.auth.throttle.failures("user:" + s.userId) == 2)
        _ = try f.auth.logIn(username: "yan", password: "right", ip: "")
        #expect(f.auth.throttle.failures("user:" + s.userId) == 0)
        for _ in 0..<2 { _ = f.code { _ = try f.auth.logIn(username: "yan", password: "bad", ip: "") } }
        #expect(f.code { _ = try f.auth.logIn(username: "yan", password: "right", ip: "") } == nil)
    }

    @Test func zeroTurnsThrottlingOff() throws {
        let f = try AuthFixture { $0.loginMaxFailures = 0 }
        try f.signUp("zed", "right")
        let t = f.auth.throttle
        t.recordFailure(["ip:1.1.1.1"])
        #expect(t.failures("ip:1.1.1.1") == 0)
        for _ in 0..<12 { #expect(f.code { _ = try f.auth.logIn(username: "zed", password: "bad", ip: "1.1.1.1") } == 101) }
        #expect(f.code { _ = try f.auth.logIn(username: "zed", password: "right", ip: "1.1.1.1") } == nil)
    }

    @Test func throttleTableStaysBounded() {
        let clock = ManualClock(millis: 0)
        let t = LoginThrottle(maxFailures: 5, windowMillis: 1000, clock: clock, capacity: 100)
        for i in 0..<1000 {
            clock.advance(byMillis: 1)
            t.recordFailure(["ip:\(i)"])
        }
        #expect(t.failures("ip:999") == 1)
        #expect(t.failures("ip:0") == 0)
        for _ in 0..<5 { t.recordFailure(["ip:x"]) }
        #expect(throws: ParseError.self) { try t.check(["ip:x"]) }
        t.reset("ip:x")
        #expect(throws: Never.self) { try t.check(["ip:x"]) }
    }
}
