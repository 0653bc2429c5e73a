import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres

/// The deployed Cloud Code bundle on PostgreSQL: one `_mb_code` row (made by `PostgresMigrator`),
/// its files as a JSON array of `[name, source]`. A deploy takes an advisory lock, builds the
/// new bundle from the stored one, writes it with the next version and notifies every host
/// (`mb_code`, the version as payload) at commit.
extension PostgresStore: CodeBundleStore {
    /// Key of the advisory lock serialising deploys ("mbcode" in ASCII).
    static let codeLockKey: Int64 = 0x6d62_636f_6465

    public var storesCodeBundles: Bool { true }

    public func codeBundle() throws(ParseError) -> CodeBundle? {
        try pool.withConnection { (c) throws(ParseError) -> CodeBundle? in try Self.readBundle(c) }
    }

    @discardableResult
    public func updateCodeBundle(base: [(file: String, text: String)],
                                 _ change: ([(file: String, text: String)]) throws(ParseError) -> [(file: String, text: String)])
        throws(ParseError) -> CodeBundle {
        try pool.transaction(isolation: .readCommitted) { (tx) throws(ParseError) -> CodeBundle in
            let c = tx.connection
            try c.execute("SELECT pg_advisory_xact_lock($1)", [.integer(Self.codeLockKey)])
            let stored = try Self.readBundle(c)
            let files = try change(stored?.files ?? base).sorted { $0.file < $1.file }
            let bundle = CodeBundle(version: (stored?.version ?? 0) + 1, files: files)
            let text = JSONValue.array(files.map { .array([.string($0.file), .string($0.text)]) }).jsonString
            try c.execute("""
                INSERT INTO _mb_code(id, version, files, at) VALUES (1, $1, $2, $3)
                ON CONFLICT (id) DO UPDATE SET version = excluded.version, files = excluded.files, at = excluded.at
                """, [.integer(bundle.version), .text(text), .integer(clock.nowMillis())])
            try c.execute("SELECT pg_notify($1, $2)", [.text(PGClusterWatch.codeChannel), .text(String(bundle.version))])
            return bundle
        }
    }

    public func observeCodeBundles(_ onChange: @escaping @Sendable () -> Void) {
        watch.on(PGClusterWatch.codeChannel) { _ in onChange() }
        watch.onReconnect(onChange)
        watch.ensureStarted(url: url)
    }

    static func readBundle(_ c: PGConnection) throws(ParseError) -> CodeBundle? {
        guard let row = try c.execute("SELECT version, files FROM _mb_code WHERE id = 1").rows.first,
              let version = row[0].int64, let text = row[1].string else { return nil }
        var files: [(file: String, text: String)] = []
        for item in try JSON.parse(text).arrayValue ?? [] {
            guard let pair = item.arrayValue, pair.count == 2, let name = pair[0].stringValue, let body = pair[1].stringValue else { continue }
            files.append((file: name, text: body))
        }
        return CodeBundle(version: version, files: files)
    }
}
