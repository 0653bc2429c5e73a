import MoonbaseCore
import MoonbaseSQLite

/// Chooses how to drive a query with a top-level geo constraint, from a capped count of R*Tree
/// hits and the table size.
///
/// Newest-first within an area (`order=-createdAt`) is the hot case (W3, W5). Measured per-row
/// costs (thread CPU, 2-core shared machine; SQLite is the system release library):
/// - c_join ≈ 0.8 µs: an R*Tree hit scanned (~0.07 µs) and its row joined (a rowid seek);
/// - c_rid ≈ 0.17 µs: an R*Tree hit scanned, exact-tested and kept in a top-K heap by id;
/// - c_walk ≈ 1.35 µs: a row walked on the createdAt index and tested against its R*Tree entry;
/// - c_idx ≈ 0.022 µs: a createdAt index entry scanned without a row seek.
/// With K = limit + skip, N rows and h hits (points spread evenly in time):
/// - `rtreeJoin` costs h × c_join;
/// - `newestByRid` costs h × c_rid + K × N / h × c_idx. Rows are inserted in time order, so
///   rid order is createdAt order for nearly every table: the K highest-rid hits passing the
///   other filters are the page, proven exact by checking that no row has
///   `rid < min(rid)` and `createdAt > min(createdAt)` of the page (a createdAt index range).
///   If the proof fails (out-of-order timestamps) the R*Tree join answers instead;
/// - `createdAtWalk` costs K × N / h × c_walk.
/// Hence: walk when h² ≥ K·N·c_walk/c_rid (≈ 7.8·K·N), rid plan when h² ≥ K·N·c_idx/(c_join − c_rid)
/// (≈ 0.035·K·N), R*Tree join below. The count stops at the walk threshold
/// (`SELECT count(*) FROM (SELECT 1 … LIMIT T)`); N is `max(rid)`, an O(log n) bound.
///
/// Ahead of these, ordered by createdAt within an area of at most 64 grid cells, `GeoCellPlan`
/// reads about K rows per cell from the (cell, createdAt) index, whatever the hit count: it is
/// taken when the R*Tree holds more hits than its expected cost in joins (counted up to that).
/// Below that count a single-box area's hits are joined by rid from the list gathered while
/// counting them (`GeoPlan.candidates`: one R*Tree search, not a count and then a join).
///
/// Figures (thread CPU per query, p50 / p99, debug test build, whole `find` incl. compile and
/// JSON; `MOONBASE_QUERY_PERF=1 swift test --filter QueryGeoPerfTests`), before → with the cell plan:
/// 100k posts: W3 0.1° box (~1,000 hits) 0.42 → 0.34 ms; W3s 0.01° box (~7 hits, join either
/// way) 0.08 → 0.08 ms; W5 5-mile circle (~2,100 hits) 1.20 → 0.32 ms. 1M posts: W3 (~10,000
/// hits) 2.2 → 0.41 ms; W3s (~90 hits, join) 0.25 → 0.26 ms; W5 (~21,000 hits; was the walk)
/// 2.0 / 3.5 → 0.35 / 0.49 ms (R*Tree join: 35 ms).
enum GeoPlanner {
    static let walkOverRid = 7.8
    static let ridOverJoin = 0.035
    static let walkOverJoin = 1.65

    /// Per-hit CPU (µs) of the R*Tree join, for the cell plan's break-even count.
    static let joinCost = 0.8

    /// How a find runs: a page of rids already found (`newestByRid`, `GeoCellPlan`), in the
    /// page's order, or one SELECT plan.
    enum Choice: Equatable {
        case rids([Int64])
        case select(GeoPlan)
    }

    /// Picks (and for the rid and cell plans, runs) the plan, counting R*Tree hits at most twice.
    ///
    /// Ordered by createdAt within a small enough area (≤ `GeoCellPlan.maxCells` cells), the
    /// hits are counted up to the cell plan's expected cost in R*Tree joins: fewer → join them
    /// (a single box: by the ids gathered while counting), more → the cell plan. Otherwise (or when the cell plan gives up) the hit count picks
    /// among the R*Tree join, the rid plan and the createdAt walk.
    static func plan(builder: SelectBuilder, order: [SortKey], limit: Int, skip: Int, on conn: Connection) throws(ParseError) -> Choice {
        guard let geo = builder.compiled.geo else { return .select(.generic) }
        let byCreated = order.count == 1 && order[0].field == "createdAt"
        if byCreated, let cells = GeoCellPlan(geo: geo), GeoCellPlan.available(builder: builder, geo: geo, on: conn) {
            let cap = Int64(cells.cost(Double(limit + skip)) / joinCost) + 1
            if geo.boxes.count == 1 {
                // Collecting the hits while counting them pays when there are fewer than `cap`;
                // for an area expected to hold many more, that scan (the exact test and the id
                // list for `cap` hits) is thrown away before the cell plan: skip it.
                let expected = expectedHits(geo: geo, table: Naming.table(builder.schema.className), on: conn)
                if expected.map({ $0 < Double(cap) * manyHits }) ?? true {
                    let found = try candidates(geo: geo, upTo: cap, on: conn)
                    if found.hits < cap { return .select(.candidates(found.ids)) }
                }
            } else if try countHits(geo: geo, upTo: cap, on: conn) < cap {
                return .select(.generic)
            }
            let desc = order[0].descending
            if let rids = try cells.run(builder: builder, geo: geo, descending: desc, limit: limit, skip: skip, on: conn) {
                return .rids(rids)
            }
        }
        guard geo.boxes.count == 1 else { return .select(.generic) }
        guard byCreated else { return .select(.rtreeJoin) }
        let k = Double(limit + skip)
        let table = Naming.table(builder.schema.className)
        guard case .integer(let maxRid)? = try conn.scalar("SELECT max(rid) FROM \(table)"), maxRid > 0 else { return .select(.rtreeJoin) }
        let n = Double(maxRid)
        let walkAt = (k * n * (order[0].descending ? walkOverRid : walkOverJoin)).squareRoot()
        let hits = try countHits(geo: geo, upTo: Int64(walkAt.rounded(.up)) + 1, on: conn)
        if Double(hits) >= walkAt { return .select(.createdAtWalk) }
        if order[0].descending, Double(hits) >= (k * n * ridOverJoin).squareRoot(),
           let rids = try newestByRid(builder: builder, limit: limit, skip: skip, on: conn) {
            return .rids(rids)
        }
        return .select(.rtreeJoin)
    }

    /// An area expected to hold this many times the cell plan's break-even count goes to the cell
    /// plan without first collecting its hits (`expectedHits`).
    static let manyHits = 4.0

    /// How many points `geo`'s boxes may hold if the points are spread evenly over the index's
    /// extent (the union of the R*Tree root's cells, which bounds every point): the table's rid
    /// bound × the share of the extent the boxes cover. Only a guess to order the plans tried
    /// (clustered points make it wrong either way; each plan still answers exactly); nil when
    /// unknown (an empty index). Read at most once a second per connection.
    ///
    /// W3 (a 0.1° box over 100,000 posts spread over 1°×1°, ~1,000 hits against a break-even of
    /// ~200) spent about 30% of its instructions collecting 200 hits before taking the cell plan.
    static func expectedHits(geo: GeoFilter, table: String, on conn: Connection) -> Double? {
        // Keyed by the R*Tree's name as it is (no key string built per query).
        let now = monotonicNanos()
        let extent: GeoExtent
        if let e = conn.memo[geo.rtree] as? GeoExtent, now &- e.readAt < 1_000_000_000 {
            extent = e
        } else {
            extent = GeoExtent.read(rtree: geo.rtree, table: table, at: now, on: conn)
            conn.memo[geo.rtree] = extent
        }
        guard let x = extent.box, extent.rows > 0 else { return nil }
        var covered = 0.0
        var touches = false
        for b in geo.boxes {
            let h = min(b.north, x.north) - max(b.south, x.south), w = min(b.east, x.east) - max(b.west, x.west)
            guard h >= 0, w >= 0 else { continue }
            touches = true
            covered += h * w
        }
        let area = (x.north - x.south) * (x.east - x.west)
        // Every point on one line or spot: a box touching it may hold them all.
        guard area > 0 else { return touches ? Double(extent.rows) : 0 }
        return Double(extent.rows) * min(1, covered / area)
    }

    /// A geo index's extent and the table's rid bound, as `expectedHits` reads them.
    struct GeoExtent {
        var box: GeoBox?
        var rows: Int64
        var readAt: UInt64

        /// The root node's cells through `rtreenode` (SQLite's R*Tree debugging function: the
        /// text `{id minLat maxLat minLng maxLng} …`), unioned; no box when it cannot be read.
        static func read(rtree: String, table: String, at now: UInt64, on conn: Connection) -> GeoExtent {
            var e = GeoExtent(box: nil, rows: 0, readAt: now)
            let node = String(rtree.dropLast()) + "_node\""   // "C__geo__f" → "C__geo__f_node"
            guard case .integer(let rows)?? = try? conn.scalar("SELECT max(rid) FROM \(table)") else { return e }
            e.rows = rows
            if case .text(let text)?? = try? conn.scalar("SELECT rtreenode(2, data) FROM \(node) WHERE nodeno = 1") {
                e.box = parseRoot(text)
            }
            return e
        }

        /// The union of the cells in `rtreenode`'s text; nil when it holds none.
        static func parseRoot(_ text: String) -> GeoBox? {
            var box: GeoBox?
            for cell in text.split(separator: "{") {
                let f = cell.split(whereSeparator: { $0 == " " || $0 == "}" }).compactMap { Double($0) }
                guard f.count == 5 else { continue }
                let b = GeoBox(south: f[1], north: f[2], west: f[3], east: f[4])
                if let u = box {
                    box = GeoBox(south: min(u.south, b.south), north: max(u.north, b.north),
                                 west: min(u.west, b.west), east: max(u.east, b.east))
                } else {
                    box = b
                }
            }
            return box
        }
    }

    /// R*Tree hits of the filter's boxes, counted up to `limit`.
    static func countHits(geo: GeoFilter, upTo limit: Int64, on conn: Connection) throws(ParseError) -> Int64 {
        let binds = geo.boxes.flatMap(\.binds)
        guard case .integer(let hits)? = try conn.scalar(geo.texts.hitCount, binds + [.integer(limit)]) else { return 0 }
        return hits
    }

    /// The R*Tree hits of a single-box filter counted up to `limit` (as `countHits`), and the ids
    /// of those that pass the exact test, as a JSON array for `GeoPlan.candidates` (complete
    /// when `hits < limit`). One R*Tree search where counting and then joining took two: for
    /// W3s (a 0.01° box, ~10 hits of 100,000 posts) the join's own search was about a tenth of
    /// the request's instructions.
    static func candidates(geo: GeoFilter, upTo limit: Int64, on conn: Connection) throws(ParseError) -> (hits: Int64, ids: String) {
        let b = geo.boxes[0]
        let binds = geo.rtreeExactBinds + b.binds + [.integer(limit)]
        var hits: Int64 = 0
        var ids = "[]"
        try conn.query(geo.texts.candidates, binds) { (s) throws(ParseError) in
            hits = s.int64(0)
            if let list = s.text(1) { ids = "[" + list + "]" }
        }
        return (hits, ids)
    }

    /// The page's rids, newest first, through the rid-ordered plan; nil when the page cannot be
    /// proven exact. Requires a single-box top-level geo filter and `order=-createdAt`.
    static func newestByRid(builder: SelectBuilder, limit: Int, skip: Int, on conn: Connection) throws(ParseError) -> [Int64]? {
        guard let geo = builder.compiled.geo, geo.boxes.count == 1 else { return nil }
        let table = Naming.table(builder.schema.className)
        let b = geo.boxes[0]
        let w = builder.residualAndACL()
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
        var rows: [(rid: Int64, createdAt: Int64)] = []
        rows.reserveCapacity(want)
        for inner in [want * 2 + 16, -1] {
            rows.removeAll(keepingCapacity: true)
            let binds: [SQLiteValue] = b.binds + geo.rtreeExactBinds
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
