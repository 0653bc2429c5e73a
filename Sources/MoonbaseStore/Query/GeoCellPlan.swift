import MoonbaseCore
import MoonbaseSQLite
#if canImport(Glibc)
import Glibc
#endif

/// Newest (or oldest) first within an area through the geo cell index: a B-tree on
/// (`Naming.geoCellExpr` = 0.05° grid cell of the point, createdAt), kept by SQLite itself.
///
/// The area's grid cells are read one after the other, each in `order` direction from its own
/// index range, with a running top-K (K = limit + skip): a cell stops at its K-th passing row or
/// at the first row that cannot beat the current K-th, and its SQL range starts at that K-th's
/// createdAt. Cells entirely inside the area skip the exact test; cells that cannot touch it are
/// not read. With points spread evenly, the rows read are about K × (cells' area / query area)
/// plus K per cell read before the K-th settles (interior cells first, nearest first), whatever
/// the table size: W5 (5 miles over 1M posts, ~21,000 points in the circle) reads ~100 rows from
/// ~25 cells instead of walking ~1,000 rows or scanning 21,000 R*Tree hits.
///
/// Every row read is checked for the rest of the query (exact area on edge cells, other
/// clauses, ACL), so results equal the other plans', ties on createdAt broken by rid in the
/// same direction. When the rows read exceed a budget (data far from even: a selective filter, a
/// cluster just outside the area), the plan gives up and the planner's other plans answer.
struct GeoCellPlan {
    /// A grid cell the area may touch. `interior`: every point of the cell is inside the area.
    struct Cell: Equatable {
        var code: Int64
        var interior: Bool
        /// Read order: interior cells first, then nearest (circle) or most covered (box) first.
        var rank: Double
    }

    let cells: [Cell]
    /// Query area ÷ area of the cells read (0…1]: the expected share of an edge cell's rows inside.
    let coverage: Double

    /// Above this many cells the per-cell statements cost more than the other plans.
    static let maxCells = 64
    /// Per-cell statement (bind, seek, reset) and per-row (index step, row seek, filters) CPU, µs.
    static let cellCost = 4.0
    static let rowCost = 1.2
    /// Degrees added around every cell: covers rounding in the cell computation.
    static let margin = 1e-9

    static func latCell(_ lat: Double) -> Int64 { Int64((lat + 90) * Naming.geoCellsPerDegree) }
    static func lngCell(_ lng: Double) -> Int64 { Int64((lng + 180) * Naming.geoCellsPerDegree) }

    /// The cells covering `geo`, or nil when there are too many (large areas: other plans).
    init?(geo: GeoFilter) {
        let per = Naming.geoCellsPerDegree
        var cells: [Cell] = []
        var seen = Set<Int64>()
        var queryArea = 0.0
        for b in geo.boxes {
            let la0 = Self.latCell(max(-90, b.south - Self.margin)), la1 = Self.latCell(min(90, b.north + Self.margin))
            let ln0 = Self.lngCell(max(-180, b.west - Self.margin)), ln1 = Self.lngCell(min(180, b.east + Self.margin))
            guard (la1 - la0 + 1) * (ln1 - ln0 + 1) <= Int64(2 * Self.maxCells) else { return nil }
            queryArea += (b.north - b.south) * (b.east - b.west)
            for i in la0...la1 {
                for j in ln0...ln1 {
                    let code = i * Naming.geoCellStride + j
                    guard !seen.contains(code) else { continue }
                    let r = GeoBox(south: Double(i) / per - 90 - Self.margin, north: Double(i + 1) / per - 90 + Self.margin,
                                   west: Double(j) / per - 180 - Self.margin, east: Double(j + 1) / per - 180 + Self.margin)
                    if let c = geo.circle {
                        guard Self.minDistance(c, r) <= c.radians + QueryCompiler.rtreeMargin else { continue }
                        let inside = Self.maxDistance(c, r).map { $0 <= c.radians - QueryCompiler.rtreeMargin } ?? false
                        let mid = geoDistanceRadians(lat1: c.latitude, lng1: c.longitude, lat2: (r.south + r.north) / 2, lng2: (r.west + r.east) / 2)
                        cells.append(Cell(code: code, interior: inside, rank: inside ? -1 : mid))
                    } else {
                        let inside = r.south >= b.south && r.north <= b.north && r.west >= b.west && r.east <= b.east
                        let overlap = max(0, min(r.north, b.north) - max(r.south, b.south)) * max(0, min(r.east, b.east) - max(r.west, b.west))
                        cells.append(Cell(code: code, interior: inside, rank: inside ? -1 : 1 - overlap * per * per))
                    }
                    seen.insert(code)
                }
            }
        }
        guard !cells.isEmpty, cells.count <= Self.maxCells else { return nil }
        if let c = geo.circle {
            // Cap area in grid units (degrees of latitude × degrees of longitude), planar estimate.
            let deg = 180 / Double.pi
            queryArea = Double.pi * (c.radians * deg) * (c.radians * deg / max(0.01, cos(c.latitude / deg)))
        }
        self.cells = cells.sorted { $0.rank < $1.rank }
        coverage = min(1, max(1e-6, queryArea * per * per / Double(cells.count)))
    }

    /// Expected CPU (µs) for a page of `k` rows.
    func cost(_ k: Double) -> Double {
        Double(cells.count) * Self.cellCost + k * (log(Double(cells.count)) + 1 + 1 / coverage) * Self.rowCost
    }

    /// Rows read before the plan gives up: 8× the even-spread expectation, plus slack.
    func budget(_ k: Int) -> Int {
        Int(8 * Double(k) * (log(Double(cells.count)) + 1 + 1 / coverage)) + 32 * cells.count + 256
    }

    /// The statement reading one cell: rid, createdAt and whether the row passes the rest of
    /// the query. Binds: `w.binds`, then the cell code and the createdAt bound.
    static func cellSQL(builder: SelectBuilder, geo: GeoFilter, exact: Bool, descending: Bool) -> QueryCompiler.Frag {
        let c = builder.schema.className
        var conds = [QueryCompiler.Frag(builder.compiled.residualSQL, builder.compiled.residualBinds)]
        if exact { conds.insert(QueryCompiler.Frag(geo.exactSQL, geo.exactBinds), at: 0) }
        if let acl = builder.acl { conds.append(acl) }
        let w = QueryCompiler.and(conds)
        let dir = descending ? " DESC" : ""
        return QueryCompiler.Frag("""
            SELECT t.rid, t.createdAt, CASE WHEN (\(w.sql)) THEN 1 ELSE 0 END FROM \(Naming.table(c)) t \
            INDEXED BY \(Naming.geoCellIndex(c, geo.field)) WHERE \(Naming.geoCellExpr(geo.field)) = ? \
            AND t.createdAt \(descending ? ">=" : "<=") ? ORDER BY t.createdAt\(dir), t.rid\(dir)
            """, w.binds)
    }

    /// The edge and interior cell statements (`cellSQL` with and without the exact test). Their
    /// texts depend only on the class, field, exact test, other filters' SQL, ACL SQL and
    /// direction, so they are built once per such combination (building both cost about 42,000
    /// instructions of a W5 query); the binds come from this query.
    static func cellStatements(builder: SelectBuilder, geo: GeoFilter, descending: Bool) -> (edge: QueryCompiler.Frag, inner: QueryCompiler.Frag) {
        let c = builder.compiled
        let key = TextKey(className: builder.schema.className, field: geo.field, exact: geo.exactSQL, residual: c.residualSQL,
                          acl: builder.acl?.sql ?? "", descending: descending)
        let sql = texts.value(key) {
            CellTexts(edge: cellSQL(builder: builder, geo: geo, exact: true, descending: descending).sql,
                      inner: cellSQL(builder: builder, geo: geo, exact: false, descending: descending).sql)
        }
        // `QueryCompiler.and` keeps every part's binds in order (a part it drops, "1", has none).
        let shared = c.residualBinds + (builder.acl?.binds ?? [])
        return (QueryCompiler.Frag(sql.edge, geo.exactBinds + shared), QueryCompiler.Frag(sql.inner, shared))
    }

    private struct TextKey: Hashable, Sendable {
        let className: String, field: String, exact: String, residual: String, acl: String
        let descending: Bool
    }
    private struct CellTexts: Sendable { let edge: String, inner: String }
    private static let texts = TextMemo<TextKey, CellTexts>()

    /// Whether the class has the cell index (tables created before it existed do not).
    /// Probed with the smallest statement that names the index (preparing fails without it),
    /// not with the plan's own statement: that one holds the query's filters and cost about a
    /// fifth of a small-box query's Swift time (W3s) to build and look up on every query.
    static func available(builder: SelectBuilder, geo: GeoFilter, on conn: Connection) -> Bool {
        let c = builder.schema.className
        let known = probes.read { $0[c]?[geo.field] }
        let probe: String
        if let known {
            probe = known
        } else {
            probe = "SELECT 1 FROM \(Naming.table(c)) INDEXED BY \(Naming.geoCellIndex(c, geo.field)) WHERE \(Naming.geoCellExpr(geo.field)) = 0"
            probes.update { all in
                if all.count >= 512 { all.removeAll() }   // names come from schemas: bounded in practice
                all[c, default: [:]][geo.field] = probe
            }
        }
        return (try? conn.withStatement(probe) { _ in true }) == true
    }

    /// The probe statements' text by class and field (it depends on nothing else).
    private static let probes = ThreadSnapshot<[String: [String: String]]>([:])

    /// The page's rids in order (createdAt then rid, in `descending` direction), or nil when
    /// the rows read exceeded the budget (`budget(limit + skip)` unless given; the caller then
    /// uses another plan).
    func run(builder: SelectBuilder, geo: GeoFilter, descending: Bool, limit: Int, skip: Int, budget givenBudget: Int? = nil,
             on conn: Connection) throws(ParseError) -> [Int64]? {
        try runCounting(builder: builder, geo: geo, descending: descending, limit: limit, skip: skip, budget: givenBudget, on: conn)?.rids
    }

    /// `run`, also telling how many index rows were read (tests and figures).
    func runCounting(builder: SelectBuilder, geo: GeoFilter, descending: Bool, limit: Int, skip: Int, budget givenBudget: Int? = nil,
                     on conn: Connection) throws(ParseError) -> (rids: [Int64], scanned: Int)? {
        let k = limit + skip
        typealias Row = (created: Int64, rid: Int64)
        func better(_ a: Row, _ b: Row) -> Bool {
            descending ? (a.created, a.rid) > (b.created, b.rid) : (a.created, a.rid) < (b.created, b.rid)
        }
        let (edgeSQL, innerSQL) = Self.cellStatements(builder: builder, geo: geo, descending: descending)
        var top: [Row] = []  // best first, at most k
        top.reserveCapacity(k + 1)
        var scanned = 0
        let budget = givenBudget ?? budget(k)
        // Both statements are taken from the cache once and their shared binds set once: per
        // cell only the cell code and the createdAt bound change (a cache lookup hashes the
        // whole SQL text, a few thousand instructions, and W5 reads about sixteen cells).
        let complete = try conn.withStatement(edgeSQL.sql) { (edge) throws(ParseError) -> Bool in
            try conn.withStatement(innerSQL.sql) { (inner) throws(ParseError) -> Bool in
                try edge.bind(edgeSQL.binds)
                try inner.bind(innerSQL.binds)
                for cell in cells {
                    let (st, n) = cell.interior ? (inner, Int32(innerSQL.binds.count)) : (edge, Int32(edgeSQL.binds.count))
                    let bound = top.count == k ? top[k - 1].created : (descending ? Int64.min : Int64.max)
                    try st.bind(.integer(cell.code), at: n + 1)
                    try st.bind(.integer(bound), at: n + 2)
                    defer { st.rewind() }
                    var got = 0
                    while try st.step() {
                        scanned += 1
                        if scanned > budget { return false }
                        let row = (st.int64(1), st.int64(0))
                        if top.count == k, !better(row, top[k - 1]) { break }
                        guard st.int64(2) == 1 else { continue }
                        var lo = 0, hi = top.count
                        while lo < hi {
                            let mid = (lo + hi) / 2
                            if better(top[mid], row) { lo = mid + 1 } else { hi = mid }
                        }
                        top.insert(row, at: lo)
                        if top.count > k { top.removeLast() }
                        got += 1
                        if got == k { break }
                    }
                }
                return true
            }
        }
        if !complete { return nil }
        return (top.dropFirst(skip).map(\.rid), scanned)
    }

    /// Least great-circle distance (radians) from the circle's centre to the rectangle; 0 when
    /// unsure (a rectangle more than 90° of longitude away).
    static func minDistance(_ c: GeoCircle, _ r: GeoBox) -> Double {
        let d2r = Double.pi / 180
        if r.west <= c.longitude, c.longitude <= r.east {
            if c.latitude < r.south { return (r.south - c.latitude) * d2r }
            if c.latitude > r.north { return (c.latitude - r.north) * d2r }
            return 0
        }
        // The nearer meridian edge; along it the distance is least at φ0 (clamped to the edge).
        func delta(_ lng: Double) -> Double {
            var d = (lng - c.longitude).truncatingRemainder(dividingBy: 360)
            if d > 180 { d -= 360 } else if d < -180 { d += 360 }
            return d
        }
        let dw = delta(r.west), de = delta(r.east)
        let dl = abs(dw) < abs(de) ? dw : de
        guard abs(dl) < 90 else { return 0 }
        let p1 = c.latitude * d2r
        let phi0 = atan2(sin(p1), cos(p1) * cos(dl * d2r)) / d2r
        let lat = min(max(phi0, r.south), r.north)
        return geoDistanceRadians(lat1: c.latitude, lng1: c.longitude, lat2: lat, lng2: c.longitude + dl)
    }

    /// Greatest distance from the centre to the rectangle: at a corner while the rectangle stays
    /// within 90° of longitude of the centre (the distance grows with |Δlng| along a parallel and
    /// is unimodal along a meridian); nil otherwise.
    static func maxDistance(_ c: GeoCircle, _ r: GeoBox) -> Double? {
        guard abs(r.west - c.longitude) < 90, abs(r.east - c.longitude) < 90 else { return nil }
        return [(r.south, r.west), (r.south, r.east), (r.north, r.west), (r.north, r.east)]
            .map { geoDistanceRadians(lat1: c.latitude, lng1: c.longitude, lat2: $0.0, lng2: $0.1) }.max()
    }
}
