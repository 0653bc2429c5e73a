import MoonbaseCore
import MoonbaseSQLite

/// Account mail tokens in `_mb_email_tokens` (made by `Migrator`).
extension SQLiteDocumentStore: MailTokenStore {
    public func saveMailToken(hash: String, userId: String, kind: String, email: String, expiresAt: Int64,
                              now: Int64) throws(ParseError) {
        try database.write { (tx) throws(ParseError) in
            let c = tx.connection
            _ = try c.run("DELETE FROM _mb_email_tokens WHERE userId = ? AND kind = ?", [.text(userId), .text(kind)])
            _ = try c.run("DELETE FROM _mb_email_tokens WHERE expiresAt < ?", [.integer(now)])
            _ = try c.run("INSERT INTO _mb_email_tokens(hash, userId, kind, email, expiresAt) VALUES (?,?,?,?,?)",
                          [.text(hash), .text(userId), .text(kind), .text(email), .integer(expiresAt)])
        }
    }

    public func takeMailToken(hash: String, kind: String) throws(ParseError) -> MailToken? {
        try database.write { (tx) throws(ParseError) -> MailToken? in
            var found: MailToken?
            try tx.connection.query("SELECT userId, email, expiresAt FROM _mb_email_tokens WHERE hash = ? AND kind = ?",
                                    [.text(hash), .text(kind)]) { (st) throws(ParseError) in
                if let u = st.text(0), let e = st.text(1) { found = MailToken(userId: u, email: e, expiresAt: st.int64(2)) }
            }
            guard let found else { return nil }
            _ = try tx.connection.run("DELETE FROM _mb_email_tokens WHERE hash = ?", [.text(hash)])
            return found
        }
    }

    public func mailTokenExpiry(hash: String, kind: String) throws(ParseError) -> Int64? {
        try database.read { (c) throws(ParseError) -> Int64? in
            if case .integer(let e)? = try c.scalar("SELECT expiresAt FROM _mb_email_tokens WHERE hash = ? AND kind = ?",
                                                   [.text(hash), .text(kind)]) { return e }
            return nil
        }
    }
}
