import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres

/// Parse Config in `_mb_config` (made by `PostgresMigrator`): one row per parameter, its value
/// as JSON text (kept as text, not `jsonb`, so a value reads back with its keys in the order
/// they were written, as on SQLite). A change notifies every host (`mb_config`), so each drops
/// its cached copy at once.
extension PostgresStore: ConfigStore {
    public func observeConfigChanges(_ onChange: @escaping @Sendable () -> Void) {
        watch.on(PGClusterWatch.configChannel) { _ in onChange() }
        watch.onReconnect(onChange)
        watch.ensureStarted(url: url)
    }

    public func configParameters() throws(ParseError) -> [ConfigParameter] {
        let rows = try pool.withConnection { (c) throws(ParseError) in
            try c.execute("SELECT name, value, masterKeyOnly FROM _mb_config ORDER BY name COLLATE \"C\"").rows
        }
        var out: [ConfigParameter] = []
        out.reserveCapacity(rows.count)
        for r in rows {
            guard let name = r[0].string, let text = r[1].string else { continue }
            out.append(ConfigParameter(name: name, value: try JSON.parse(text), masterKeyOnly: r[2] == .bool(true)))
        }
        return out
    }

    public func updateConfig(_ changes: [ConfigChange]) throws(ParseError) {
        try pool.transaction { (tx) throws(ParseError) in
            let c = tx.connection
            for change in changes {
                switch change {
                case .set(let name, let value):
                    try c.execute("""
                        INSERT INTO _mb_config(name, value) VALUES ($1, $2)
                        ON CONFLICT (name) DO UPDATE SET value = excluded.value
                        """, [.text(name), .text(value.jsonString)])
                case .remove(let name):
                    try c.execute("DELETE FROM _mb_config WHERE name = $1", [.text(name)])
                case .masterKeyOnly(let name, let on):
                    try c.execute("UPDATE _mb_config SET masterKeyOnly = $1 WHERE name = $2", [.bool(on), .text(name)])
                }
            }
            try c.execute("SELECT pg_notify($1, '')", [.text(PGClusterWatch.configChannel)])
        }
    }
}
