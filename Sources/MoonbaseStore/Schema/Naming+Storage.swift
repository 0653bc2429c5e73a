import MoonbaseCore

/// DDL of class tables and their side structures. Every name is built from validated class,
/// field and index names (the callers check them first) and double-quoted; no request value is
/// ever spliced into this text.
extension Naming {
    /// Names a class may not take because the store or SQLite owns the table: SQLite reserves
    /// every name starting with `sqlite_` in any letter case (`sqlite_master`,
    /// `sqlite_sequence`, `sqlite_stat1`; creating one fails inside SQLite), and the store's
    /// own tables start with `_mb_` (already refused: class names start with a letter unless
    /// they are system classes). Side tables (`Post__geo__f`, `Post__idx__n`) contain `__`,
    /// which class names may not.
    static func isReservedTableName(_ name: String) -> Bool {
        let u = name.utf8
        guard u.count >= 7 else { return false }
        var i = u.startIndex
        for c in "sqlite_".utf8 {
            let b = u[i]
            if (b >= 65 && b <= 90 ? b + 32 : b) != c { return false }
            i = u.index(after: i)
        }
        return true
    }

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

    /// Grid cells per degree of the geo cell index (0.05° cells: about 5.5 × 4.2 km at 40°N).
    static let geoCellsPerDegree = 20.0
    /// Cell code = latitude cell × `geoCellStride` + longitude cell (longitude cells are 0…7200).
    static let geoCellStride: Int64 = 8192

    /// `"Post__geocell__location"`: the B-tree index on (grid cell of the point, createdAt).
    static func geoCellIndex(_ c: String, _ f: String) -> String { "\"\(c)__geocell__\(f)\"" }

    /// The grid cell code of a row's point (NULL without a point), spelled identically by the
    /// index DDL and the queries that use it: `trunc((lat + 90) · 20) · 8192 + trunc((lng + 180) · 20)`.
    /// Both operands are non-negative, so the integer cast floors; `GeoCellPlan.cell` computes the
    /// same IEEE operations in Swift.
    static func geoCellExpr(_ f: String) -> String {
        let n = Int(geoCellsPerDegree)
        return "(CAST((json_extract(data,'$.\(f).latitude')+90)*\(n) AS INTEGER)*\(geoCellStride)"
            + "+CAST((json_extract(data,'$.\(f).longitude')+180)*\(n) AS INTEGER))"
    }

    /// The R*Tree of a GeoPoint field, back-filled, and the triggers keeping it in sync with the
    /// class table on update (only when the point changed) and delete, so every write path that
    /// changes rows (including set-based `deleteWhere`/`updateWhere`) maintains it in the same
    /// transaction. Rows are created only by `WriteTransaction.insert`, which writes a new
    /// object's R*Tree rows itself (`insertGeoRows`) from the values it holds: an insert trigger
    /// cost a sub-program and a parse of the row's JSON text per create (schema version 5
    /// dropped the insert triggers of earlier versions).
    /// Also the geo cell index (`geoCellExpr`, createdAt): newest-first within an area reads a
    /// few index entries per cell (`GeoCellPlan`) instead of every point of the area.
    /// A new object's R*Tree row: binds rid, latitude, longitude (`WriteTransaction.insertGeoRows`).
    static func geoInsertSQL(_ c: String, _ f: String) -> String {
        "INSERT INTO \(geoTable(c, f))(id, minLat, maxLat, minLng, maxLng) VALUES(?1, ?2, ?2, ?3, ?3)"
    }

    static func geoDDL(_ c: String, _ f: String) -> String {
        let g = geoTable(c, f)
        let raw = "\(c)__geo__\(f)"
        func point(_ row: String) -> String {
            "SELECT \(row).rid AS id, la, ln FROM (SELECT json_extract(\(row).data,'$.\(f).latitude') AS la, json_extract(\(row).data,'$.\(f).longitude') AS ln) WHERE la IS NOT NULL AND ln IS NOT NULL"
        }
        return """
        CREATE VIRTUAL TABLE IF NOT EXISTS \(g) USING rtree(id, minLat, maxLat, minLng, maxLng);
        CREATE INDEX IF NOT EXISTS \(geoCellIndex(c, f)) ON \(table(c))(\(geoCellExpr(f)), createdAt);
        INSERT OR REPLACE INTO \(g)(id, minLat, maxLat, minLng, maxLng)
          SELECT rid, la, la, ln, ln FROM (SELECT rid, json_extract(data,'$.\(f).latitude') AS la, json_extract(data,'$.\(f).longitude') AS ln FROM \(table(c)))
          WHERE la IS NOT NULL AND ln IS NOT NULL;
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
