import MoonbaseCore
import MoonbaseSQLite

/// Chooses how to drive a query with a top-level geo constraint.
///
/// Newest-first within an area (`order=-createdAt`) is the hot case (W3, W5). Measured per-row
/// costs (thread CPU, 100k posts, 2-core shared machine, debug test build; SQLite is the system
/// release library):
/// - an R*Tree candidate: ~0.07 µs to scan, ~0.75 µs more to join its row (a rowid seek), so
///   the plain R*Tree join for a 0.1° box (~1,000 hits) costs ~1.1 ms;
/// - a row walked on the createdAt index and tested against its R*Tree entry: ~1.35 µs.
///
/// Plans, cheapest first where they apply:
/// - `newestByRid` (order exactly `-createdAt`, few hits): rows are inserted in time order, so
///   rid order is createdAt order for nearly every table. Take the R*Tree hits sorted by id
///   (inside SQLite, no row seeks), join only until `limit + skip` rows pass the other filters,
///   then prove the page exact: no row anywhere has `rid < min(rid)` and
///   `createdAt > min(createdAt)` of the page (a short createdAt-index range, no seeks). If
///   that fails (out-of-order timestamps) the adaptive plans below run instead. W3 0.1°:
///   ~0.2 ms instead of ~1.1 ms.
/// - `createdAtWalk` (many hits): cost ≈ (limit + skip) × N / hits × c_walk.
/// - `rtreeJoin` (few hits, or any other order): cost ≈ hits × c_join.
/// The walk wins when hits² > (limit + skip) × N × c_walk / c_join; the planner counts R*Tree
/// hits up to that threshold (`SELECT count(*) FROM (SELECT 1 … LIMIT T)`: it stops at T) and
/// picks. N is `max(rid)`, an O(log n) upper bound of the row count.
enum GeoPlanner {
    /// c_walk / c_join for the adaptive choice, from the figures above.
    static let walkToJoinCostRatio = 2.0
    /// c_walk / c_rid: a hit costs the rid plan ~0.17 µs (scan + top-K sort + exact test).
    static let walkToRidCostRatio = 8.0

    /// The adaptive plan for `order` (nil order key = nearest first or unordered → R*Tree join).
    static func choose(builder: SelectBuilder, order: [SortKey], limit: Int, skip: Int, on conn: Connection) throws(ParseError) -> GeoPlan {
        guard let geo = builder.compiled.geo, geo.boxes.count == 1 else { return .generic }
        guard order.count == 1, order[0].field == "createdAt" else { return .rtreeJoin }
        return try manyHits(builder: builder, geo: geo, limit: limit, skip: skip, ratio: walkToJoinCostRatio, on: conn) ? .createdAtWalk : .rtreeJoin
    }

    static func manyHits(builder: SelectBuilder, geo: GeoFilter, limit: Int, skip: Int, ratio: Double, on conn: Connection) throws(ParseError) -> Bool {
        let table = Naming.table(builder.schema.className)
        guard case .integer(let n)? = try conn.scalar("SELECT max(rid) FROM \(table)"), n > 0 else { return false }
        let threshold = Int((Double(limit + skip) * Double(n) * ratio).squareRoot().rounded(.up))
        if threshold >= Int(n) { return false }
        let b = geo.boxes[0]
        let sql = "SELECT count(*) FROM (SELECT 1 FROM \(geo.rtree) WHERE maxLat >= ? AND minLat <= ? AND maxLng >= ? AND minLng <= ? LIMIT ?)"
        guard case .integer(let hits)? = try conn.scalar(sql, [.real(b.south), .real(b.north), .real(b.west), .real(b.east), .integer(Int64(threshold))]) else {
            return false
        }
        return hits >= threshold
    }

    /// How a find runs: a page of rids already found (`newestByRid`), or one SELECT plan.
    enum Choice: Equatable {
        case rids([Int64])
        case select(GeoPlan)
    }

    /// Picks (and for `newestByRid`, runs) the plan, counting R*Tree hits at most once.
    static func plan(builder: SelectBuilder, order: [SortKey], limit: Int, skip: Int, on conn: Connection) throws(ParseError) -> Choice {
        guard let geo = builder.compiled.geo, geo.boxes.count == 1 else { return .select(.generic) }
        guard order.count == 1, order[0].field == "createdAt" else { return .select(.rtreeJoin) }
        if order[0].descending {
            if try manyHits(builder: builder, geo: geo, limit: limit, skip: skip, ratio: walkToRidCostRatio, on: conn) {
                return .select(.createdAtWalk)
            }
            if let rids = try newestByRid(builder: builder, order: order, limit: limit, skip: skip, counted: true, on: conn) {
                return .rids(rids)
            }
        }
        return .select(try choose(builder: builder, order: order, limit: limit, skip: skip, on: conn))
    }

    /// The page's rids in `-createdAt` order through the `newestByRid` plan, or nil when that plan
    /// does not apply or cannot prove its page exact. `counted`: the caller already checked
    /// that the hits are few.
    static func newestByRid(builder: SelectBuilder, order: [SortKey], limit: Int, skip: Int, counted: Bool = false,
                            on conn: Connection) throws(ParseError) -> [Int64]? {
        guard let geo = builder.compiled.geo, geo.boxes.count == 1, order.count == 1, order[0].field == "createdAt",
              order[0].descending else { return nil }
        if !counted, try manyHits(builder: builder, geo: geo, limit: limit, skip: skip, ratio: walkToRidCostRatio, on: conn) { return nil }
        let table = Naming.table(builder.schema.className)
        let b = geo.boxes[0]
        var conds = [QueryCompiler.Frag(builder.compiled.residualSQL, builder.compiled.residualBinds)]
        if let acl = builder.acl { conds.append(acl) }
        let w = QueryCompiler.and(conds)
        // The LIMIT keeps the ordered subquery from being flattened into the join: it runs as a
        // co-routine yielding ids newest-rid first, and the join stops after `want` rows. A
        // small inner limit lets SQLite keep a top-K heap instead of sorting every hit; when
        // the other filters drop too many rows, run again without it (LIMIT -1).
        let sql = """
            SELECT t.rid, t.createdAt FROM (SELECT r.id FROM \(geo.rtree) r WHERE r.maxLat >= ? AND r.minLat <= ? \
            AND r.maxLng >= ? AND r.minLng <= ? AND \(geo.rtreeExactSQL) ORDER BY r.id DESC LIMIT ?) g \
            CROSS JOIN \(table) t ON t.rid = g.id WHERE \(w.sql) LIMIT ?
            """
        let want = limit + skip
        let innerLimit = want * 2 + 16
        var rows: [(rid: Int64, createdAt: Int64)] = []
        rows.reserveCapacity(want)
        for inner in [innerLimit, -1] {
            rows.removeAll(keepingCapacity: true)
            let binds: [SQLiteValue] = [.real(b.south), .real(b.north), .real(b.west), .real(b.east)] + geo.rtreeExactBinds
                + [.integer(Int64(inner))] + w.binds + [.integer(Int64(want))]
            try conn.query(sql, binds) { s in rows.append((s.int64(0), s.int64(1))) }
            if rows.count == want { break }
        }
        if rows.count == want, let minRid = rows.map(\.rid).min(), let minCreated = rows.map(\.createdAt).min() {
            let check = "SELECT 1 FROM \(table) WHERE createdAt > ? AND rid < ? LIMIT 1"
            if try conn.scalar(check, [.integer(minCreated), .integer(minRid)]) != nil { return nil }
        }
        rows.sort { ($0.createdAt, $0.rid) > ($1.createdAt, $1.rid) }
        return rows.dropFirst(skip).prefix(limit).map(\.rid)
    }
}
