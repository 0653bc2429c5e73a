import MoonbaseCore

/// DDL of class tables and their side structures. Every name is built from validated class,
/// field and index names (the callers check them first) and double-quoted; no request value is
/// ever spliced into this text.
extension Naming {
    /// `"Post__idx__<name>"`: a declared B-tree index.
    public static func indexName(_ className: String, _ name: String) -> String { "\"\(className)__idx__\(name)\"" }

    /// `CREATE TABLE` for a class (layout in `Naming`'s doc) with indexes on `createdAt` and `updatedAt`.
    static func classTableDDL(_ c: String) -> String {
        """
        CREATE TABLE IF NOT EXISTS \(table(c))(
          rid INTEGER PRIMARY KEY,
          objectId TEXT NOT NULL UNIQUE,
          createdAt INTEGER NOT NULL,
          updatedAt INTEGER NOT NULL,
          ACL TEXT,
          rperm TEXT,
          wperm TEXT,
          data TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS "\(c)__createdAt" ON \(table(c))(createdAt);
        CREATE INDEX IF NOT EXISTS "\(c)__updatedAt" ON \(table(c))(updatedAt);
        """
    }

    /// The R*Tree of a GeoPoint field, back-filled, and the triggers keeping it in sync with the
    /// class table on insert, update (only when the point changed) and delete, so every write
    /// path (including set-based `deleteWhere`/`updateWhere`) maintains it in the same transaction.
    static func geoDDL(_ c: String, _ f: String) -> String {
        let g = geoTable(c, f)
        let raw = "\(c)__geo__\(f)"
        func point(_ row: String) -> String {
            "SELECT \(row).rid AS id, la, ln FROM (SELECT json_extract(\(row).data,'$.\(f).latitude') AS la, json_extract(\(row).data,'$.\(f).longitude') AS ln) WHERE la IS NOT NULL AND ln IS NOT NULL"
        }
        return """
        CREATE VIRTUAL TABLE IF NOT EXISTS \(g) USING rtree(id, minLat, maxLat, minLng, maxLng);
        INSERT OR REPLACE INTO \(g)(id, minLat, maxLat, minLng, maxLng)
          SELECT rid, la, la, ln, ln FROM (SELECT rid, json_extract(data,'$.\(f).latitude') AS la, json_extract(data,'$.\(f).longitude') AS ln FROM \(table(c)))
          WHERE la IS NOT NULL AND ln IS NOT NULL;
        CREATE TRIGGER IF NOT EXISTS "\(raw)__ai" AFTER INSERT ON \(table(c)) BEGIN
          INSERT INTO \(g)(id, minLat, maxLat, minLng, maxLng) SELECT id, la, la, ln, ln FROM (\(point("new")));
        END;
        CREATE TRIGGER IF NOT EXISTS "\(raw)__au" AFTER UPDATE OF data ON \(table(c))
          WHEN json_extract(old.data,'$.\(f)') IS NOT json_extract(new.data,'$.\(f)') BEGIN
          DELETE FROM \(g) WHERE id = old.rid;
          INSERT INTO \(g)(id, minLat, maxLat, minLng, maxLng) SELECT id, la, la, ln, ln FROM (\(point("new")));
        END;
        CREATE TRIGGER IF NOT EXISTS "\(raw)__ad" AFTER DELETE ON \(table(c)) BEGIN
          DELETE FROM \(g) WHERE id = old.rid;
        END;
        """
    }

    /// The FTS5 table of a text index (rowid = class rid; `unicode61 remove_diacritics 2`
    /// tokenizer; prefix indexes for 2 and 3 characters), back-filled, with sync triggers.
    static func ftsDDL(_ c: String, _ name: String, fields: [String]) -> String {
        let t = ftsTable(c, name)
        let raw = "\(c)__fts__\(name)"
        let cols = fields.map { "\"\($0)\"" }.joined(separator: ", ")
        func vals(_ row: String) -> String { fields.map { "json_extract(\(row)data,'$.\($0)')" }.joined(separator: ", ") }
        let changed = fields.map { "json_extract(old.data,'$.\($0)') IS NOT json_extract(new.data,'$.\($0)')" }.joined(separator: " OR ")
        return """
        CREATE VIRTUAL TABLE IF NOT EXISTS \(t) USING fts5(\(cols), tokenize = 'unicode61 remove_diacritics 2', prefix = '2 3');
        DELETE FROM \(t);
        INSERT INTO \(t)(rowid, \(cols)) SELECT rid, \(vals("")) FROM \(table(c));
        CREATE TRIGGER IF NOT EXISTS "\(raw)__ai" AFTER INSERT ON \(table(c)) BEGIN
          INSERT INTO \(t)(rowid, \(cols)) VALUES (new.rid, \(vals("new.")));
        END;
        CREATE TRIGGER IF NOT EXISTS "\(raw)__au" AFTER UPDATE OF data ON \(table(c)) WHEN \(changed) BEGIN
          DELETE FROM \(t) WHERE rowid = old.rid;
          INSERT INTO \(t)(rowid, \(cols)) VALUES (new.rid, \(vals("new.")));
        END;
        CREATE TRIGGER IF NOT EXISTS "\(raw)__ad" AFTER DELETE ON \(table(c)) BEGIN
          DELETE FROM \(t) WHERE rowid = old.rid;
        END;
        """
    }

    static func dropFTSDDL(_ c: String, _ name: String) -> String {
        let raw = "\(c)__fts__\(name)"
        return """
        DROP TRIGGER IF EXISTS "\(raw)__ai"; DROP TRIGGER IF EXISTS "\(raw)__au"; DROP TRIGGER IF EXISTS "\(raw)__ad";
        DROP TABLE IF EXISTS \(ftsTable(c, name));
        """
    }

    /// `CREATE [UNIQUE] INDEX` over the canonical field expressions (`fieldExpr`, byte-identical
    /// to what the query compiler emits, so the planner can use it).
    static func indexDDL(_ c: String, _ spec: IndexSpec, fields: [String: FieldInfo]) -> String {
        let cols = spec.fields.map { f -> String in
            let type = f.path.contains(".") ? nil : fields[f.path]?.type
            return fieldExpr(f.path, type: type) + (f.descending ? " DESC" : "")
        }.joined(separator: ", ")
        return "CREATE \(spec.unique ? "UNIQUE " : "")INDEX IF NOT EXISTS \(indexName(c, spec.name)) ON \(table(c))(\(cols))"
    }
}
