import MoonbaseCore

/// A password-reset or email-verification token as stored (by the hash of its clear text).
public struct MailToken: Sendable, Equatable {
    public var userId: String
    /// The address the link was sent to.
    public var email: String
    /// Expiry, ms since the epoch.
    public var expiresAt: Int64

    public init(userId: String, email: String, expiresAt: Int64) {
        self.userId = userId
        self.email = email
        self.expiresAt = expiresAt
    }
}

/// Single-use account mail tokens, kept only as hashes; `kind` names their use
/// (`passwordReset`, `verifyEmail`).
public protocol MailTokenStore: Sendable {
    /// Saves a token for `userId` and `kind`, in one transaction with removing the user's
    /// earlier tokens of that kind and every token expired before `now` (ms).
    func saveMailToken(hash: String, userId: String, kind: String, email: String, expiresAt: Int64,
                       now: Int64) throws(ParseError)
    /// Removes the token and returns it (expired or not), or nil when there is none of `kind`.
    /// Joins the caller's transaction, if any.
    func takeMailToken(hash: String, kind: String) throws(ParseError) -> MailToken?
    /// The token's expiry, without using it up; nil when there is none of `kind`.
    func mailTokenExpiry(hash: String, kind: String) throws(ParseError) -> Int64?
}
