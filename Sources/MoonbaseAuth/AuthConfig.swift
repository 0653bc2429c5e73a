import MoonbaseCore

/// Settings of the auth service (DESIGN §8, §10 "Users").
///
/// Defaults follow the contract: sessions last a year, OAuth access tokens an hour, refresh tokens
/// 30 days; login throttling allows 10 failed attempts per account or IP within 15 minutes.
public struct AuthConfig: Sendable {
    /// The application id; OAuth `client_id` must equal it.
    public var appId: String
    /// Lifetime of a session made by sign-up or login.
    public var sessionLifetimeMillis: Int64 = 365 * 24 * 3_600_000
    /// Lifetime of an OAuth access token (a session token).
    public var accessTokenLifetimeMillis: Int64 = 3_600_000
    /// Lifetime of an OAuth refresh token.
    public var refreshTokenLifetimeMillis: Int64 = 30 * 24 * 3_600_000
    /// Failed login attempts allowed per account and per IP within `loginWindowMillis`; 0 = off.
    public var loginMaxFailures: Int = 10
    /// The throttling window.
    public var loginWindowMillis: Int64 = 15 * 60_000
    /// Resolved sessions kept in memory (the cache is emptied when it reaches this size).
    public var sessionCacheCapacity: Int = 10_000

    public init(appId: String) { self.appId = appId }

    /// The configuration with the overrides found in `environment`:
    /// `MOONBASE_APP_ID`, `MOONBASE_LOGIN_MAX_FAILURES` (0 = off), `MOONBASE_SESSION_LIFETIME_DAYS`,
    /// `MOONBASE_ACCESS_TOKEN_LIFETIME_SECONDS`, `MOONBASE_REFRESH_TOKEN_LIFETIME_DAYS`.
    /// - Throws: `ParseError` 1 naming the variable when a value is not a non-negative integer
    ///   (or zero where a lifetime is expected).
    public static func fromEnvironment(_ environment: [String: String], appId: String = "moonbase") throws(ParseError) -> AuthConfig {
        var c = AuthConfig(appId: environment["MOONBASE_APP_ID"] ?? appId)
        func number(_ key: String, min: Int64) throws(ParseError) -> Int64? {
            guard let raw = environment[key] else { return nil }
            guard let n = Int64(raw), n >= min, n <= Int64(Int32.max) else {
                throw ParseError(.internalError, "\(key) must be an integer ≥ \(min), got \"\(raw)\"")
            }
            return n
        }
        if let n = try number("MOONBASE_LOGIN_MAX_FAILURES", min: 0) { c.loginMaxFailures = Int(n) }
        if let n = try number("MOONBASE_SESSION_LIFETIME_DAYS", min: 1) { c.sessionLifetimeMillis = n * 24 * 3_600_000 }
        if let n = try number("MOONBASE_ACCESS_TOKEN_LIFETIME_SECONDS", min: 1) { c.accessTokenLifetimeMillis = n * 1000 }
        if let n = try number("MOONBASE_REFRESH_TOKEN_LIFETIME_DAYS", min: 1) { c.refreshTokenLifetimeMillis = n * 24 * 3_600_000 }
        return c
    }
}
