import MoonbaseAuth
import MoonbaseCore
import MoonbaseJSON
import Testing

@Suite("OAuth password grant")
struct AuthOAuthTests {
    func grant(_ f: AuthFixture, _ form: [String: String]) -> OAuthResponse { f.auth.tokenGrant(form: form, ip: "10.1.1.1") }

    @Test func passwordGrantThenRefreshRotation() throws {
        let f = try AuthFixture()
        let u = try f.signUp("ada", "pw-ada", email: "ada@example.com")
        let r = grant(f, ["grant_type": "password", "username": "ada", "password": "pw-ada", "client_id": "testapp"])
        #expect(r.status == 200 && r.headers["Cache-Control"] == "no-store")
        #expect(Set(r.body.keys) == ["access_token", "token_type", "expires_in", "refresh_token"])
        #expect(r.body["token_type"] == "Bearer" && r.body["expires_in"] == 3600)
        let access = try #require(r.body["access_token"]?.stringValue)
        let refresh = try #require(r.body["refresh_token"]?.stringValue)
        #expect(try f.auth.resolveSession(access)?.userId == u.userId)
        #expect(try f.auth.resolveSession(refresh) == nil)

        // Access tokens last an hour.
        f.clock.advance(byMillis: 3_600_000)
        #expect(try f.auth.resolveSession(access) == nil)

        let r2 = grant(f, ["grant_type": "refresh_token", "refresh_token": refresh, "client_id": "testapp"])
        #expect(r2.status == 200)
        let access2 = try #require(r2.body["access_token"]?.stringValue)
        let refresh2 = try #require(r2.body["refresh_token"]?.stringValue)
        #expect(access2 != access && refresh2 != refresh)
        #expect(try f.auth.resolveSession(access2)?.userId == u.userId)
        // Rotation: the old refresh token no longer works.
        let reused = grant(f, ["grant_type": "refresh_token", "refresh_token": refresh, "client_id": "testapp"])
        #expect(reused.status == 400 && reused.body["error"] == "invalid_grant")
        #expect(reused.body["error_description"]?.stringValue?.isEmpty == false)

        // Logging out with the access token revokes its refresh token.
        try f.auth.logOut(access2)
        let afterLogout = grant(f, ["grant_type": "refresh_token", "refresh_token": refresh2, "client_id": "testapp"])
        #expect(afterLogout.body["error"] == "invalid_grant")
    }

    @Test func refreshTokensExpire() throws {
        let f = try AuthFixture()
        try f.signUp("bea", "pw")
        let r = grant(f, ["grant_type": "password", "username": "bea", "password": "pw", "client_id": "testapp"])
        let refresh = try #require(r.body["refresh_token"]?.stringValue)
        f.clock.advance(byMillis: 30 * 24 * 3_600_000)
        #expect(grant(f, ["grant_type": "refresh_token", "refresh_token": refresh, "client_id": "testapp"]).body["error"] == "invalid_grant")
    }

    @Test func errorsFollowRFC6749() throws {
        let f = try AuthFixture { $0.loginMaxFailures = 2 }
        try f.signUp("cal", "pw-cal")
        func check(_ form: [String: String], _ status: Int, _ error: String) {
            let r = grant(f, form)
            #expect(r.status == status && r.body["error"]?.stringValue == error, "\(form) -> \(r)")
            #expect(r.body["error_description"]?.stringValue != nil)
        }
        check([:], 400, "invalid_request")
        check(["grant_type": "client_credentials", "client_id": "testapp"], 400, "unsupported_grant_type")
        check(["grant_type": "password", "username": "cal", "password": "pw-cal"], 401, "invalid_client")
        check(["grant_type": "password", "username": "cal", "password": "pw-cal", "client_id": "other"], 401, "invalid_client")
        check(["grant_type": "password", "password": "pw-cal", "client_id": "testapp"], 400, "invalid_request")
        check(["grant_type": "password", "username": "cal", "client_id": "testapp"], 400, "invalid_request")
        check(["grant_type": "refresh_token", "client_id": "testapp"], 400, "invalid_request")
        check(["grant_type": "refresh_token", "refresh_token": "rt:nope", "client_id": "testapp"], 400, "invalid_grant")
        check(["grant_type": "password", "username": "cal", "password": "bad", "client_id": "testapp"], 400, "invalid_grant")
        check(["grant_type": "password", "username": "cal", "password": "bad", "client_id": "testapp"], 400, "invalid_grant")
        // Throttling applies to the password grant too.
        let t = grant(f, ["grant_type": "password", "username": "cal", "password": "pw-cal", "client_id": "testapp"])
        #expect(t.status == 429 && t.headers["Retry-After"] != nil)
        #expect(f.auth.throttle.failures("ip:10.1.1.1") == 2)
    }
}
