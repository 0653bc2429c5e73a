import MoonbaseCore
import MoonbaseCrypto
import MoonbaseJSON
import MoonbaseStore

/// The answer of `POST /oauth/token`, rendered as is by the endpoint: RFC 6749 §5.1 on success,
/// §5.2 (`{"error", "error_description"}`) on failure. Not a `ParseError`: the body shape differs.
public struct OAuthResponse: Sendable, Equatable {
    public var status: Int
    public var body: JSONObject
    /// Always `Cache-Control: no-store` and `Pragma: no-cache` (§5.1); `Retry-After` when throttled.
    public var headers: [String: String]

    static func success(_ body: JSONObject) -> OAuthResponse {
        OAuthResponse(status: 200, body: body, headers: noStore)
    }

    static func error(_ code: String, _ description: String, status: Int = 400) -> OAuthResponse {
        var headers = noStore
        if status == 401 { headers["WWW-Authenticate"] = "Basic realm=\"moonbase\"" }
        return OAuthResponse(status: status, body: ["error": .string(code), "error_description": .string(description)],
                             headers: headers)
    }

    static let noStore = ["Cache-Control": "no-store", "Pragma": "no-cache"]
}

extension AuthService {
    /// `POST /oauth/token` (form or JSON body flattened to strings, no Parse headers needed).
    ///
    /// - `grant_type=password` with `username` (or an email), `password`, `client_id` (= the app
    ///   id): a session whose token is the `access_token` (1 hour by default) plus a
    ///   `refresh_token` (30 days), both stored only as hashes.
    /// - `grant_type=refresh_token` with `refresh_token`, `client_id`: rotates both tokens on the
    ///   same session row, inside the write transaction, so a refresh token works exactly once
    ///   and the previous access token stops working too.
    ///
    /// Success: `{access_token, token_type: "Bearer", expires_in, refresh_token}`. Errors:
    /// `invalid_request` (400, missing parameter), `invalid_client` (401, wrong or missing
    /// `client_id`), `unsupported_grant_type` (400), `invalid_grant` (400: wrong credentials,
    /// unknown, used or expired refresh token; 429 with `Retry-After` when login throttling
    /// refuses the attempt). Argon2id runs for the password grant: call on a worker.
    public func tokenGrant(form: [String: String], ip: String) -> OAuthResponse {
        guard let grant = form["grant_type"], !grant.isEmpty else {
            return .error("invalid_request", "grant_type is required")
        }
        guard grant == "password" || grant == "refresh_token" else {
            return .error("unsupported_grant_type", "grant_type must be password or refresh_token")
        }
        guard let client = form["client_id"], !client.isEmpty else {
            return .error("invalid_client", "client_id is required", status: 401)
        }
        guard ConstantTime.equals(client, config.appId) else {
            return .error("invalid_client", "unknown client_id", status: 401)
        }
        do {
            return grant == "password" ? try passwordGrant(form, ip: ip) : try refreshGrant(form)
        } catch {
            switch error.code {
            case .requestLimitExceeded:
                var r = OAuthResponse.error("invalid_grant", error.message, status: 429)
                for (k, v) in error.headers { r.headers[k] = v }
                return r
            case .objectNotFound, .invalidSessionToken:
                return .error("invalid_grant", error.message)
            case .usernameMissing, .passwordMissing:
                return .error("invalid_request", error.message)
            default:
                return OAuthResponse(status: error.httpStatus >= 500 ? 500 : 400,
                                     body: ["error": "server_error", "error_description": .string(error.message)],
                                     headers: OAuthResponse.noStore)
            }
        }
    }

    private func passwordGrant(_ form: [String: String], ip: String) throws(ParseError) -> OAuthResponse {
        guard form["username"]?.isEmpty == false || form["email"]?.isEmpty == false else {
            return .error("invalid_request", "username is required")
        }
        guard form["password"]?.isEmpty == false else { return .error("invalid_request", "password is required") }
        let user = try authenticate(username: form["username"], email: form["email"], password: form["password"], ip: ip)
        let s = try createSession(userId: user.objectId, action: .oauth)
        return .success(tokenBody(accessToken: s.sessionToken, refreshToken: s.refreshToken ?? ""))
    }

    private func refreshGrant(_ form: [String: String]) throws(ParseError) -> OAuthResponse {
        guard let refresh = form["refresh_token"], !refresh.isEmpty else {
            return .error("invalid_request", "refresh_token is required")
        }
        guard refresh.utf8.count <= 512 else { return .error("invalid_grant", "invalid refresh token") }
        let hash = TokenHash.sha256Hex(refresh)
        let now = clock.nowMillis()
        let tokens = try store.transaction { () throws(ParseError) -> (String, String)? in
            guard let s = try Self.sessionRow(store.session(refreshTokenHash: hash)),
                  let iso = s.fields["refreshExpiresAt"]?["iso"]?.stringValue, let exp = ISO8601.parse(iso), exp > now,
                  try store.fetchRaw("_User", objectId: s.userId) != nil else { return nil }
            let access = SessionToken.generate()
            let next = SessionToken.generate(prefix: "rt:")
            _ = try store.update("_Session", objectId: s.row.objectId, changes: [
                "sessionTokenHash": .string(TokenHash.sha256Hex(access)),
                "expiresAt": dateValue(now + config.accessTokenLifetimeMillis),
                "refreshTokenHash": .string(TokenHash.sha256Hex(next)),
                "refreshExpiresAt": dateValue(now + config.refreshTokenLifetimeMillis),
            ], identity: .master)
            return (access, next)
        }
        guard let (access, next) = tokens else { return .error("invalid_grant", "invalid or expired refresh token") }
        return .success(tokenBody(accessToken: access, refreshToken: next))
    }

    private func tokenBody(accessToken: String, refreshToken: String) -> JSONObject {
        [
            "access_token": .string(accessToken),
            "token_type": "Bearer",
            "expires_in": .int(config.accessTokenLifetimeMillis / 1000),
            "refresh_token": .string(refreshToken),
        ]
    }
}
