import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// Parse Config in `_mb_config` (made by `Migrator`): one row per parameter, its value as JSON
/// text.
extension SQLiteDocumentStore: ConfigStore {
    public func configParameters() throws(ParseError) -> [ConfigParameter] {
        var out: [ConfigParameter] = []
        try database.read { (c) throws(ParseError) in
            try c.query("SELECT name, value, masterKeyOnly FROM _mb_config ORDER BY name") { (st) throws(ParseError) in
                guard let name = st.text(0), let text = st.text(1) else { return }
                out.append(ConfigParameter(name: name, value: try JSON.parse(text), masterKeyOnly: st.int64(2) != 0))
            }
        }
        return out
    }

    public func updateConfig(_ changes: [ConfigChange]) throws(ParseError) {
        try database.write { (tx) throws(ParseError) in
            let c = tx.connection
            for change in changes {
                switch change {
                case .set(let name, let value):
                    _ = try c.run("""
                        INSERT INTO _mb_config(name, value) VALUES (?, ?)
                        ON CONFLICT(name) DO UPDATE SET value = excluded.value
                        """, [.text(name), .text(value.jsonString)])
                case .remove(let name):
                    _ = try c.run("DELETE FROM _mb_config WHERE name = ?", [.text(name)])
                case .masterKeyOnly(let name, let on):
                    _ = try c.run("UPDATE _mb_config SET masterKeyOnly = ? WHERE name = ?", [.integer(on ? 1 : 0), .text(name)])
                }
            }
        }
    }
}
