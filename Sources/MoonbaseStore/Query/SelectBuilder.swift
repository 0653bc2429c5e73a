import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// How a query with a top-level geo constraint is driven.
public enum GeoPlan: Sendable, Equatable {
    /// No geo constraint, or one SQLite plans by itself (`rid IN (R*Tree candidates)`).
    case generic
    /// The R*Tree range is the outer loop; each candidate joins its row by `rid`. Best when the
    /// box holds few points.
    case rtreeJoin
    /// The `createdAt` index is walked in `order` direction and each row is tested against its
    /// R*Tree entry, until `limit` rows match. Best when the box holds many points.
    case createdAtWalk
    /// The R*Tree candidates are collected into a set first (`t.rid IN (SELECT r.id …)`, the
    /// exact test decided on R*Tree coordinates), then rows are read in rid order (sequential
    /// B-tree access) and sorted.
    case rtreeSetScan
    /// The candidate set is built as for `rtreeSetScan`; the `createdAt` index is walked and each
    /// row probes the in-memory set.
    case rtreeSetWalk
    /// The rows whose rids are in a JSON array (`GeoPlanner.candidates`: the R*Tree hits that
    /// passed the exact test, collected while counting them), joined by rid and sorted. For an
    /// area with few hits it reads the R*Tree once per query instead of twice (count, then join).
    case candidates(String)
}

/// Assembles the SELECT for a find: columns, compiled where, ACL filter, order, limit/skip.
///
/// Result columns are always `objectId, createdAt, updatedAt, ACL, data` (indexes 0…4), the
/// shape `RowSerializer` reads.
struct SelectBuilder {
    static let columns = "t.objectId, t.createdAt, t.updatedAt, t.ACL, t.data"
    /// `candidatesUnordered`'s text before its WHERE, by class.
    private static let candidatesHeads = TextMemo<String, String>()

    let schema: QuerySchema
    let compiled: CompiledWhere
    /// Read filter for non-master callers, nil for master.
    let acl: QueryCompiler.Frag?

    /// The ACL read filter: public rows, `*` readers, or the user or one of its roles among readers.
    static func aclFilter(_ identity: Identity) -> QueryCompiler.Frag? {
        switch identity {
        case .master: return nil
        case .anonymous: return QueryCompiler.Frag("(t.rperm IS NULL OR instr(t.rperm,'|*|')>0)")
        case .user:
            let c = ACLs.principalCondition(identity, column: "t.rperm", orPublic: "t.rperm IS NULL OR instr(t.rperm,'|*|')>0")
            return QueryCompiler.Frag(c.sql, c.binds)
        }
    }

    /// `ORDER BY …` (without the keyword), or nil when unordered. `$nearSphere` sorts nearest
    /// first unless `order` is given; `$score` sorts best text match first.
    func orderBy(_ order: [SortKey], unaryPlus: Bool = false) throws(ParseError) -> QueryCompiler.Frag? {
        var terms: [String] = []
        var binds: [SQLiteValue] = []
        for key in order {
            let dir = key.descending ? " DESC" : ""
            switch key.field {
            case "objectId", "createdAt", "updatedAt":
                terms.append("t.\(key.field)\(dir)")
            case "$score":
                guard let text = compiled.text else { throw ParseError(.invalidQuery, "order by $score needs a $text constraint") }
                terms.append("(SELECT bm25(\(text.ftsTable)) FROM \(text.ftsTable) WHERE \(text.ftsTable) MATCH ? AND rowid = t.rid)")
                binds.append(.text(text.match))
            default:
                let type = key.field.contains(".") ? nil : schema.fields[key.field]?.type
                switch type {
                case .geoPoint?, .relation?, .acl?:
                    throw ParseError(.invalidQuery, "cannot order by \(key.field): it is a \(type!.rawValue)")
                default: terms.append(Naming.fieldExpr(key.field, type: type) + dir)
                }
            }
        }
        if order.isEmpty, let geo = compiled.geo, let c = geo.center {
            terms.append("geo_distance(json_extract(t.data,'$.\(geo.field).latitude'),json_extract(t.data,'$.\(geo.field).longitude'),?,?)")
            binds += [.real(c.latitude), .real(c.longitude)]
        }
        guard !terms.isEmpty else { return nil }
        if unaryPlus { terms = terms.map { "+" + $0 } }
        // Ties broken by rid in the direction of the last key: deterministic pages, and the
        // createdAt index (whose entries end with the rowid) still yields this order.
        if let last = order.last, last.field == "createdAt" || last.field == "updatedAt" {
            terms.append(last.descending ? "\(unaryPlus ? "+" : "")t.rid DESC" : "\(unaryPlus ? "+" : "")t.rid")
        }
        return QueryCompiler.Frag(terms.joined(separator: ", "), binds)
    }

    /// The full statement for `plan` with `LIMIT ? OFFSET ?`.
    func select(plan: GeoPlan, order: [SortKey], limit: Int, skip: Int, columns: String = SelectBuilder.columns) throws(ParseError) -> QueryCompiler.Frag {
        var sql = "SELECT \(columns) FROM "
        var binds: [SQLiteValue] = []
        var conds: [QueryCompiler.Frag] = []
        let table = Naming.table(schema.className)
        switch plan {
        case .rtreeJoin, .createdAtWalk:
            guard let geo = compiled.geo, geo.boxes.count == 1 else { return try select(plan: .generic, order: order, limit: limit, skip: skip, columns: columns) }
            let b = geo.boxes[0]
            if plan == .rtreeJoin {
                sql += "\(geo.rtree) r CROSS JOIN \(table) t ON t.rid = r.id"
            } else {
                sql += "\(table) t CROSS JOIN \(geo.rtree) r ON r.id = t.rid"
            }
            conds.append(QueryCompiler.Frag("r.maxLat >= ? AND r.minLat <= ? AND r.maxLng >= ? AND r.minLng <= ?",
                                            b.binds))
            conds.append(QueryCompiler.Frag(geo.rtreeExactSQL, geo.rtreeExactBinds))
            conds.append(QueryCompiler.Frag(compiled.residualSQL, compiled.residualBinds))
        case .rtreeSetScan, .rtreeSetWalk:
            guard let geo = compiled.geo, geo.boxes.count == 1 else { return try select(plan: .generic, order: order, limit: limit, skip: skip, columns: columns) }
            let b = geo.boxes[0]
            sql += "\(table) t"
            conds.append(QueryCompiler.Frag(
                "\(plan == .rtreeSetWalk ? "+" : "")t.rid IN (SELECT r.id FROM \(geo.rtree) r WHERE r.maxLat >= ? AND r.minLat <= ? AND r.maxLng >= ? AND r.minLng <= ? AND \(geo.rtreeExactSQL))",
                b.binds + geo.rtreeExactBinds))
            conds.append(QueryCompiler.Frag(compiled.residualSQL, compiled.residualBinds))
        case .candidates(let ids):
            guard compiled.geo != nil else { return try select(plan: .generic, order: order, limit: limit, skip: skip, columns: columns) }
            sql += "json_each(?) g CROSS JOIN \(table) t ON t.rid = g.value"
            binds.append(.text(ids))
            conds.append(QueryCompiler.Frag(compiled.residualSQL, compiled.residualBinds))
        case .generic:
            sql += "\(table) t"
            conds.append(QueryCompiler.Frag(compiled.sql, compiled.binds))
        }
        if let acl { conds.append(acl) }
        let w = QueryCompiler.and(conds)
        if w.sql != "1" {
            sql += " WHERE " + w.sql
            binds += w.binds
        }
        // A unary + keeps SQLite from satisfying the order with an index: that plan sorts.
        if let o = try orderBy(order, unaryPlus: plan == .rtreeSetScan) {
            sql += " ORDER BY " + o.sql
            binds += o.binds
        }
        sql += " LIMIT ? OFFSET ?"
        binds += [.integer(Int64(limit)), .integer(Int64(skip))]
        return QueryCompiler.Frag(sql, binds)
    }

    /// The rows with these rids (columns as `columns`), in the list's order: the rid plans
    /// (`newestByRid`, `GeoCellPlan`) already hold the page in order. One cached point lookup per
    /// rid, run inside the caller's read transaction: `WHERE rid IN (…) ORDER BY …` built an
    /// IN-list B-tree and a sorter for a page already sorted (about 45,000 instructions of a
    /// "newest near me" query). A rid without a row is skipped (the executor reads the page in
    /// the plan's read transaction, so that happens only to callers without one).
    static func rowsByRid(_ className: String, _ rids: [Int64], on conn: Connection,
                          _ row: (Statement) throws(ParseError) -> Void) throws(ParseError) {
        guard !rids.isEmpty else { return }
        try conn.withStatement("SELECT \(columns) FROM \(Naming.table(className)) t WHERE t.rid = ?") { (st) throws(ParseError) in
            for rid in rids {
                try st.bind(.integer(rid), at: 1)
                if try st.step() { try row(st) }
                st.rewind()   // the one bind is replaced next round
            }
        }
    }

    /// The rows of `GeoPlan.candidates(ids)` that pass the other filters, unordered and
    /// unlimited, with `t.rid` as a sixth column: `QueryExecutor.candidatesPage` sorts and pages them.
    func candidatesUnordered(_ ids: String) -> QueryCompiler.Frag {
        let w = residualAndACL()
        var sql = Self.candidatesHeads.value(schema.className) {
            "SELECT \(Self.columns), t.rid FROM json_each(?) g CROSS JOIN \(Naming.table(schema.className)) t ON t.rid = g.value"
        }
        if w.sql != "1" { sql += " WHERE " + w.sql }
        return QueryCompiler.Frag(sql, [.text(ids)] + w.binds)
    }

    /// Every filter but the top-level geo constraint (`CompiledWhere.residualSQL`) AND the ACL
    /// read filter: the WHERE of plans whose rows already come from the geo index.
    func residualAndACL() -> QueryCompiler.Frag {
        var conds = [QueryCompiler.Frag(compiled.residualSQL, compiled.residualBinds)]
        if let acl { conds.append(acl) }
        return QueryCompiler.and(conds)
    }

    /// `SELECT count(*)` under the same filters (generic plan: no order, no limit).
    func count() -> QueryCompiler.Frag {
        var conds = [QueryCompiler.Frag(compiled.sql, compiled.binds)]
        if let acl { conds.append(acl) }
        let w = QueryCompiler.and(conds)
        return QueryCompiler.Frag("SELECT count(*) FROM \(Naming.table(schema.className)) t WHERE \(w.sql)", w.binds)
    }
}
