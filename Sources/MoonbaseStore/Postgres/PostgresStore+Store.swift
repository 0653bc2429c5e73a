import MoonbaseCore

/// Whether this build's `PostgresStore` implements every part of `Store`, checked at run time so
/// the composition root compiles while the parts are built separately: the one declaration
/// `extension PostgresStore: Store {}` (once every part below conforms) makes `asStore` succeed.
extension PostgresStore {
    /// Each part of `Store` with whether this build's `PostgresStore` implements it.
    public var storeParts: [(name: String, implemented: Bool)] {
        let me: Any = self
        return [
            ("DocumentStore", me is any DocumentStore),
            ("ChangeFeedStore", me is any ChangeFeedStore),
            ("AccountStore", me is any AccountStore),
            ("JobHistoryStore", me is any JobHistoryStore),
            ("FileBlobStore", me is any FileBlobStore),
            ("ConfigStore", me is any ConfigStore),
            ("MailTokenStore", me is any MailTokenStore),
            ("UsageStore", me is any UsageStore),
            ("BackupStore", me is any BackupStore),
        ]
    }

    /// This store as the whole `Store` the server runs on.
    /// - Throws: 1 naming the parts this build lacks when `PostgresStore` is not a `Store` yet.
    public func asStore() throws(ParseError) -> any Store {
        let me: Any = self
        if let store = me as? any Store { return store }
        let missing = storeParts.filter { !$0.implemented }.map(\.name)
        let what = missing.isEmpty
            ? "every part is implemented but `PostgresStore` is not declared a `Store`"
            : "it does not implement \(missing.joined(separator: ", ")) yet"
        throw ParseError(.internalError, "this build cannot serve on PostgreSQL: \(what); run on SQLite (without --database / MOONBASE_DATABASE_URL)")
    }
}
