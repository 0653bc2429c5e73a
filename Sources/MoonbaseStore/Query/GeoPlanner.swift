import MoonbaseCore
import MoonbaseSQLite

/// Chooses how to drive a query with a top-level geo constraint (`GeoPlan`).
///
/// Newest-first within an area (`order=-createdAt`) is the hot case (W3, W5). Two plans:
/// - R*Tree join: visit every point in the box, join its row, sort, keep `limit`.
///   Cost ≈ hits × c_join.
/// - createdAt walk: walk the createdAt index newest first, test each row's R*Tree entry and
///   exact distance, stop at `limit + skip` matches. Cost ≈ (limit + skip) × N / hits × c_walk
///   for points spread evenly in time.
/// The walk wins when hits² > (limit + skip) × N × c_walk / c_join. The planner counts R*Tree
/// hits up to that threshold (`SELECT count(*) FROM (SELECT 1 … LIMIT T)`, cheap: it stops at T)
/// and picks. N is `max(rid)` (an O(log n) upper bound of the row count).
///
/// Measured (debug build of the tests is not representative; figures from the release timing
/// loop in QueryGeoPerfTests, 2-core shared machine): see `walkToJoinCostRatio`.
enum GeoPlanner {
    /// c_walk / c_join: cost of testing one walked row versus joining one R*Tree candidate.
    static let walkToJoinCostRatio = 2.0

    static func choose(builder: SelectBuilder, order: [SortKey], limit: Int, skip: Int, on conn: Connection) throws(ParseError) -> GeoPlan {
        guard let geo = builder.compiled.geo, geo.boxes.count == 1 else { return .generic }
        guard let first = order.first, first.field == "createdAt", order.count == 1 else { return .rtreeJoin }
        let table = Naming.table(builder.schema.className)
        guard case .integer(let n)? = try conn.scalar("SELECT max(rid) FROM \(table)"), n > 0 else { return .rtreeJoin }
        let wanted = Double(limit + skip)
        let threshold = Int((wanted * Double(n) * walkToJoinCostRatio).squareRoot().rounded(.up))
        if threshold >= Int(n) { return .rtreeJoin }
        let b = geo.boxes[0]
        let sql = "SELECT count(*) FROM (SELECT 1 FROM \(geo.rtree) WHERE maxLat >= ? AND minLat <= ? AND maxLng >= ? AND minLng <= ? LIMIT ?)"
        guard case .integer(let hits)? = try conn.scalar(sql, [.real(b.south), .real(b.north), .real(b.west), .real(b.east), .integer(Int64(threshold))]) else {
            return .rtreeJoin
        }
        return hits >= threshold ? .createdAtWalk : .rtreeJoin
    }
}
