import MoonbaseCore
import MoonbasePostgres

/// Account mail tokens in `_mb_email_tokens` (made by `PostgresMigrator`).
extension PostgresStore: MailTokenStore {
    public func saveMailToken(hash: String, userId: String, kind: String, email: String, expiresAt: Int64,
                              now: Int64) throws(ParseError) {
        try pool.transaction { (tx) throws(ParseError) in
            let c = tx.connection
            try c.execute("DELETE FROM _mb_email_tokens WHERE userId = $1 AND kind = $2", [.text(userId), .text(kind)])
            try c.execute("DELETE FROM _mb_email_tokens WHERE expiresAt < $1", [.integer(now)])
            try c.execute("INSERT INTO _mb_email_tokens(hash, userId, kind, email, expiresAt) VALUES ($1, $2, $3, $4, $5)",
                          [.text(hash), .text(userId), .text(kind), .text(email), .integer(expiresAt)])
        }
    }

    /// One statement: of two hosts taking the same token at once, exactly one gets it.
    public func takeMailToken(hash: String, kind: String) throws(ParseError) -> MailToken? {
        let row = try pool.withConnection { (c) throws(ParseError) in
            try c.execute("DELETE FROM _mb_email_tokens WHERE hash = $1 AND kind = $2 RETURNING userId, email, expiresAt",
                          [.text(hash), .text(kind)]).rows.first
        }
        guard let row, let user = row[0].string, let email = row[1].string, let expiry = row[2].int64 else { return nil }
        return MailToken(userId: user, email: email, expiresAt: expiry)
    }

    public func mailTokenExpiry(hash: String, kind: String) throws(ParseError) -> Int64? {
        try pool.withConnection { (c) throws(ParseError) in
            try c.execute("SELECT expiresAt FROM _mb_email_tokens WHERE hash = $1 AND kind = $2",
                          [.text(hash), .text(kind)]).scalar?.int64
        }
    }
}
