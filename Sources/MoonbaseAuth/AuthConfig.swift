import MoonbaseCore

/// Settings of the auth service.
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
}
