import MoonbaseCore
import MoonbaseSQLite

/// Newest (or oldest) first within an area on PostgreSQL, through the geo cell index of the
/// GeoPoint field (`PostgresLayout.geoIndexDDL`: a B-tree on (0.05° grid cell of the point,
/// createdAt, objectId)), in one statement.
///
/// Through the GiST index alone, a page of the 20 newest posts within 5 miles over 1M posts
/// fetched every point of the circle's bounding box (~27,000 rows on ~18,500 heap pages) to sort
/// them by date. This statement reads each grid cell of the area (`GeoCellPlan`'s cells) from
/// its own index range in date order, K = limit + skip rows at most per cell:
/// 1. a bound: the K-th best date among the cells entirely inside the area (no exact test
///    there), read K index entries per interior cell;
/// 2. every cell again, only rows at least as good as that bound (an index range), the edge
///    cells with the exact test, K rows at most per cell; the best K of those is the page.
/// The page's rows are all at least as good as the bound (K interior rows already are), so the
/// bound loses nothing, and it keeps an edge cell that barely touches the area from being read
/// back in time until it finds K points. With points spread evenly, W5 reads ~250 buffers
/// instead of ~18,800. Results equal the generic statement's: the same filter on every row
/// (exact area on edge cells, the other clauses, ACL), the same order and tie-break by objectId.
///
/// Taken only for `order=createdAt` or `-createdAt` alone with at least one interior cell and at
/// most `GeoCellPlan.maxCells` cells; smaller areas (no full cell inside: few points) and larger
/// ones keep the GiST statement.
enum PostgresGeoCells {
    /// The page statement (columns as `PostgresStore.find` reads them), or nil when the plan does
    /// not apply. `filter`: every condition but the geo one (the `where` residual, ACL, pointer
    /// permissions), over the class table aliased `t`.
    static func statement(className: String, geo: GeoFilter, order: [SortKey], filter: QueryCompiler.Frag,
                          limit: Int, skip: Int) -> QueryCompiler.Frag? {
        guard order.count == 1, order[0].field == "createdAt", let plan = GeoCellPlan(geo: geo) else { return nil }
        let interior = plan.cells.filter(\.interior)
        guard !interior.isEmpty else { return nil }
        let m = QueryCompiler.pgMark
        let desc = order[0].descending
        let dir = desc ? " DESC" : ""
        let table = Naming.table(className)
        let cell = PostgresLayout.geoCellExpr(geo.field)
        let k: SQLiteValue = .integer(Int64(limit + skip))
        let rowOrder = "t.createdAt\(dir), t.objectId COLLATE \"C\"\(dir)"
        // Rows "at least as good as the bound": not older (descending) or not newer (ascending).
        let (best, cmp, none) = desc ? ("min", ">=", Int64.min) : ("max", "<=", Int64.max)
        func codes(_ cells: [GeoCellPlan.Cell]) -> SQLiteValue {
            .text("{" + cells.map { String($0.code) }.joined(separator: ",") + "}")
        }
        let sql = """
            SELECT x.objectId, x.createdAt, x.updatedAt, x.acl, x.data FROM \
            (SELECT CASE WHEN count(*) = \(m)::bigint THEN \(best)(y.createdAt) END AS b FROM \
            (SELECT y.createdAt FROM unnest(\(m)::int8[]) AS ic(code), LATERAL (SELECT t.createdAt, t.objectId FROM \(table) t \
            WHERE \(cell) = ic.code AND (\(filter.sql)) ORDER BY \(rowOrder) LIMIT \(m)::bigint) y \
            ORDER BY y.createdAt\(dir) LIMIT \(m)::bigint) y) bd, \
            unnest(\(m)::int8[], \(m)::bool[]) AS c(code, inside), \
            LATERAL (SELECT t.objectId, t.createdAt, t.updatedAt, t.acl, t.data FROM \(table) t \
            WHERE \(cell) = c.code AND t.createdAt \(cmp) coalesce(bd.b, \(m)::bigint) AND (c.inside OR (\(geo.exactSQL))) \
            AND (\(filter.sql)) ORDER BY \(rowOrder) LIMIT \(m)::bigint) x \
            ORDER BY x.createdAt\(dir), x.objectId COLLATE "C"\(dir) LIMIT \(m)::bigint OFFSET \(m)::bigint
            """
        let binds: [SQLiteValue] = [k, codes(interior)] + filter.binds + [k, k, codes(plan.cells),
            .text("{" + plan.cells.map { $0.interior ? "t" : "f" }.joined(separator: ",") + "}"), .integer(none)]
            + geo.exactBinds + filter.binds + [k, .integer(Int64(limit)), .integer(Int64(skip))]
        return QueryCompiler.Frag(sql, binds)
    }
}
