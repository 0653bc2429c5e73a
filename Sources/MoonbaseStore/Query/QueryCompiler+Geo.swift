import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
#if canImport(Glibc)
import Glibc
#endif

/// Earth radii used to convert `$maxDistanceInMiles`/`Kilometers` to radians (Parse's values).
public enum EarthRadius {
    public static let miles = 3958.8
    public static let kilometers = 6371.0
}

extension QueryCompiler {
    /// `$nearSphere` (+ `$maxDistance…`), `$within {$box}`, `$geoWithin {$centerSphere|$box}`.
    ///
    /// Compiles to an R*Tree candidate set (bounding boxes) AND an exact test on the stored
    /// coordinates (great-circle distance through `geo_point_distance`, or the exact box through
    /// `geo_point_in_box`, each reading the stored point in one pass). At the top level the filter is also recorded in `state.geo` for the planner. The SQL texts come from
    /// `GeoTexts` (built once per class, field and shape); only the binds are computed here.
    func geo(_ field: FieldRef, _ op: String, _ raw: JSONValue, ops: JSONObject, depth: Int, state: State) throws(ParseError) -> Frag {
        let shape: GeoTexts.Shape
        let boxes: [GeoBox]
        let binds: [SQLiteValue]
        var center: (latitude: Double, longitude: Double)?
        var circle: GeoCircle?   // the exact area when it is a spherical cap (`.distance`)
        switch op {
        case "$nearSphere":
            guard case .geoPoint(let cLat, let cLng) = try QueryValue.geoPoint(raw) else { return .alwaysFalse }
            var radius: Double?
            for (key, scale) in Self.distanceKeys {
                guard let v = ops[key] else { continue }
                guard let d = v.doubleValue, d >= 0, d.isFinite else {
                    throw ParseError(.invalidQuery, "\(key) needs a non-negative number")
                }
                radius = d * scale
            }
            if let r = radius {
                circle = GeoCircle(latitude: cLat, longitude: cLng, radians: r)
                (shape, boxes, binds) = (.distance, Self.boxes(aroundLatitude: cLat, longitude: cLng, radians: r), [.real(cLat), .real(cLng), .real(r)])
            } else {
                (shape, boxes, binds) = (.present, [Self.world], [])
            }
            center = (cLat, cLng)
        case "$within", "$geoWithin":
            guard let spec = raw.objectValue, spec.count == 1, let entry = spec.entries.first else {
                throw ParseError(.invalidQuery, "\(op) needs exactly one of $box or $centerSphere")
            }
            switch entry.key {
            case "$box":
                guard let pts = entry.value.arrayValue, pts.count == 2,
                      case .geoPoint(let sLat, let wLng) = try QueryValue.geoPoint(pts[0]),
                      case .geoPoint(let nLat, let eLng) = try QueryValue.geoPoint(pts[1]) else {
                    throw ParseError(.invalidQuery, "$box needs [southwest, northeast] GeoPoints")
                }
                guard sLat <= nLat else { throw ParseError(.invalidQuery, "$box: the southwest corner must be south of the northeast corner") }
                boxes = wLng <= eLng
                    ? [GeoBox(south: sLat, north: nLat, west: wLng, east: eLng)]
                    : [GeoBox(south: sLat, north: nLat, west: wLng, east: 180), GeoBox(south: sLat, north: nLat, west: -180, east: eLng)]
                (shape, binds) = (.box, [.real(sLat), .real(nLat), .real(wLng), .real(eLng)])
            case "$centerSphere" where op == "$geoWithin":
                guard let a = entry.value.arrayValue, a.count == 2, let r = a[1].doubleValue, r >= 0, r.isFinite else {
                    throw ParseError(.invalidQuery, "$centerSphere needs [center, radians]")
                }
                let cLat: Double, cLng: Double
                if let pair = a[0].arrayValue {
                    guard pair.count == 2, let x = pair[0].doubleValue, let y = pair[1].doubleValue,
                          y >= -90, y <= 90, x >= -180, x <= 180 else {
                        throw ParseError(.invalidQuery, "$centerSphere center must be [longitude, latitude] or a GeoPoint")
                    }
                    (cLat, cLng) = (y, x)
                } else {
                    guard case .geoPoint(let y, let x) = try QueryValue.geoPoint(a[0]) else { return .alwaysFalse }
                    (cLat, cLng) = (y, x)
                }
                circle = GeoCircle(latitude: cLat, longitude: cLng, radians: r)
                (shape, boxes, binds) = (.distance, Self.boxes(aroundLatitude: cLat, longitude: cLng, radians: r), [.real(cLat), .real(cLng), .real(r)])
            case "$polygon" where op == "$geoWithin":
                let given = entry.value.parseType == "Polygon" ? (entry.value["coordinates"] ?? .null) : entry.value
                let pts = try Polygon.parsePoints(given, what: "$polygon", code: .invalidQuery)
                boxes = [GeoBox(south: pts.map(\.0).min()!, north: pts.map(\.0).max()!,
                                west: pts.map(\.1).min()!, east: pts.map(\.1).max()!)]
                (shape, binds) = (.polygon, [.text(JSONValue.array(pts.map { .array([.double($0.0), .double($0.1)]) }).jsonString)])
            default:
                throw ParseError(.invalidQuery, "unsupported \(op) shape \(entry.key): use $box, $centerSphere or $polygon")
            }
        default:
            throw ParseError(.invalidQuery, "unknown operator \(op)")
        }
        if op == "$nearSphere" {
            state.nearCount += 1
            guard state.nearCount == 1 else { throw ParseError(.invalidQuery, "only one $nearSphere per query") }
        }
        guard field.kind == .json else { throw ParseError(.invalidQuery, "\(op) needs a GeoPoint field") }
        switch field.declared {
        case .geoPoint?: break
        case nil: return .alwaysFalse  // no such field yet: nothing can match, and no R*Tree exists
        default: throw ParseError(.invalidQuery, "\(op) needs a GeoPoint field; \(field.path) is a \(field.declared!.rawValue)")
        }
        let texts = GeoTexts.of(className: schema.className, field: field.path, shape: shape, boxCount: boxes.count)
        var filter = GeoFilter(field: field.path, boxes: boxes, exactSQL: texts.exact, exactBinds: binds, center: center,
                               texts: texts)
        // A polygon's bounding box is no area of its own: the planner's box shortcuts (cells or
        // R*Tree coordinates inside the box count as matches) do not hold, so it stays generic.
        let isPolygon = shape == .polygon
        if dialect == .postgres { return try pgGeo(filter, circle: circle, isPolygon: isPolygon, depth: depth, state: state) }
        if depth == 0, state.geo == nil, !isPolygon {
            filter.rtreeExactSQL = texts.rtreeExact
            filter.circle = circle
            if let c = circle {
                filter.rtreeExactBinds = [.real(c.latitude), .real(c.longitude), .real(c.radians - Self.rtreeMargin),
                                          .real(c.latitude), .real(c.longitude), .real(c.radians + Self.rtreeMargin)] + binds
            } else if boxes.count == 1 {
                filter.rtreeExactBinds = boxes[0].binds + binds
            } else {
                filter.rtreeExactBinds = binds
            }
            state.geo = filter
        }
        return Frag(texts.generic, boxes.flatMap(\.binds) + binds)
    }

    /// `$nearSphere`'s distance options and their scale to radians.
    static let distanceKeys: [(String, Double)] = [("$maxDistance", 1.0), ("$maxDistanceInRadians", 1.0),
                                                    ("$maxDistanceInMiles", 1 / EarthRadius.miles),
                                                    ("$maxDistanceInKilometers", 1 / EarthRadius.kilometers)]

    /// Margin (radians) around a circle's edge inside which R*Tree coordinates are not trusted:
    /// a 32-bit float ulp at 180° is 1.5e-5° ≈ 2.7e-7 rad, so 1e-6 rad is conclusive everywhere.
    static let rtreeMargin = 1e-6

    static let world = GeoBox(south: -90, north: 90, west: -180, east: 180)

    /// `{"$geoIntersects": {"$point": GeoPoint}}` on a Polygon field: polygons containing the point.
    func geoIntersects(_ field: FieldRef, _ raw: JSONValue) throws(ParseError) -> Frag {
        guard let o = raw.objectValue, o.count == 1, let p = o["$point"] else {
            throw ParseError(.invalidQuery, "$geoIntersects needs {\"$point\": GeoPoint}")
        }
        guard case .geoPoint(let lat, let lng) = try QueryValue.geoPoint(p) else { return .alwaysFalse }
        guard field.kind == .json else { throw ParseError(.invalidQuery, "$geoIntersects needs a Polygon field") }
        switch field.declared {
        case .polygon?: break
        case nil: return .alwaysFalse
        default: throw ParseError(.invalidQuery, "$geoIntersects needs a Polygon field; \(field.path) is a \(field.declared!.rawValue)")
        }
        if dialect == .postgres {
            return Self.pgPolygonContains(poly: Self.pgJSON(field.path, "coordinates"), lat: "\(Self.m)::float8", lng: "\(Self.m)::float8",
                                          binds: [.real(lat), .real(lng)])
        }
        return Frag("mb_polygon_contains(json_extract(data,'$.\(field.path).coordinates'),?,?) = 1", [.real(lat), .real(lng)])
    }

    /// Bounding boxes of a spherical cap (centre in degrees, radius in radians), split across the
    /// antimeridian; near a pole the cap spans every longitude.
    static func boxes(aroundLatitude lat: Double, longitude lng: Double, radians r: Double) -> [GeoBox] {
        let deg = 180 / Double.pi
        let margin = 1e-9
        if r >= Double.pi { return [world] }
        let south = lat - r * deg - margin, north = lat + r * deg + margin
        if south <= -90 || north >= 90 {
            return [GeoBox(south: max(-90, south), north: min(90, north), west: -180, east: 180)]
        }
        let s = sin(r) / cos(lat / deg)
        if s >= 1 { return [GeoBox(south: south, north: north, west: -180, east: 180)] }
        let dLng = asin(s) * deg + margin
        let west = lng - dLng, east = lng + dLng
        if west < -180 {
            return [GeoBox(south: south, north: north, west: west + 360, east: 180), GeoBox(south: south, north: north, west: -180, east: east)]
        }
        if east > 180 {
            return [GeoBox(south: south, north: north, west: west, east: 180), GeoBox(south: south, north: north, west: -180, east: east - 360)]
        }
        return [GeoBox(south: south, north: north, west: west, east: east)]
    }
}

/// The SQL texts of a geo filter. They depend on the class, the field and the filter's shape —
/// never on a value (every value is a bind) — so they are built once per (class, field, shape)
/// and shared by every later query: building them with string interpolation and joins cost a
/// map query (W3s) about 20,000 instructions, 4% of the whole request.
struct GeoTexts: Sendable {
    /// The exact test's kind: it decides the exact SQL and the R*Tree-row test.
    enum Shape: UInt8, Sendable {
        /// Unbounded `$nearSphere`: the point exists.
        case present
        /// `$nearSphere` with a distance, `$centerSphere`: `geo_distance` to a centre ≤ a radius.
        case distance
        /// `$box` (split in two across the antimeridian).
        case box
        /// `$polygon`: `mb_polygon_contains`.
        case polygon
    }

    struct Key: Hashable, Sendable {
        let className: String, field: String
        let shape: Shape
        let boxCount: Int
    }

    /// `Naming.geoTable(class, field)`.
    let rtree: String
    /// `GeoFilter.exactSQL`: binds are the filter's exact binds.
    let exact: String
    /// `rid IN (one R*Tree search per box, UNION ALL) AND exact`: binds are each box's
    /// south, north, west, east, then the exact binds.
    let generic: String
    /// `GeoFilter.rtreeExactSQL` (plans that joined the R*Tree row `r`): binds are the circle's
    /// inner and outer tests (a distance), or the box (one box), then the exact binds.
    let rtreeExact: String
    /// The planner's count of R*Tree hits up to a cap (`GeoPlanner.countHits`): binds are each
    /// box's, then the cap.
    let hitCount: String
    /// The same count for one box that also gathers the ids passing the exact test
    /// (`GeoPlanner.candidates`): binds are `rtreeExact`'s, the box, the cap.
    let candidates: String

    /// Texts by key.
    private static let memo = TextMemo<Key, GeoTexts>()

    static func of(className: String, field: String, shape: Shape, boxCount: Int) -> GeoTexts {
        let key = Key(className: className, field: field, shape: shape, boxCount: boxCount)
        return memo.value(key) { build(key) }
    }

    static func build(_ k: Key) -> GeoTexts {
        let lat = "json_extract(data,'$.\(k.field).latitude')", lng = "json_extract(data,'$.\(k.field).longitude')"
        let exact: String
        switch k.shape {
        case .present: exact = "\(lat) IS NOT NULL"
        // The point read once per row (`geo_point_*`, one pass over `data`) rather than with two
        // `json_extract` calls (two whole-document parses: a fifth of a "newest near me" query).
        // Every SQLite plan tests the area through this same text, so they agree to the last bit.
        case .distance: exact = "geo_point_distance(data,'\(k.field)',?,?) <= ?"
        case .box: exact = "geo_point_in_box(data,'\(k.field)',?,?,?,?) = 1"   // west > east: across the antimeridian
        case .polygon: exact = "mb_polygon_contains(?,\(lat),\(lng)) = 1"
        }
        let rtree = Naming.geoTable(k.className, k.field)
        let box = "maxLat >= ? AND minLat <= ? AND maxLng >= ? AND minLng <= ?"
        // `column` of every R*Tree entry in any of the boxes (one search per box).
        func searches(_ column: String) -> String {
            Array(repeating: "SELECT \(column) FROM \(rtree) WHERE \(box)", count: k.boxCount).joined(separator: " UNION ALL ")
        }
        let generic = "rid IN (\(searches("id"))) AND \(exact)"
        let fallback = "(SELECT \(exact) FROM \(Naming.table(k.className)) WHERE rid = r.id)"
        let rtreeExact: String
        if k.shape == .distance {
            let d = "geo_distance(r.minLat,r.minLng,?,?)"
            rtreeExact = "CASE WHEN \(d) <= ? THEN 1 WHEN \(d) > ? THEN 0 ELSE \(fallback) END"
        } else if k.boxCount == 1 {
            // Inside even after outward rounding → inside; otherwise ask the stored coordinates.
            rtreeExact = "((r.minLat >= ? AND r.maxLat <= ? AND r.minLng >= ? AND r.maxLng <= ?) OR \(fallback))"
        } else {
            rtreeExact = fallback
        }
        // `SELECT 1`, not the id: counting up to a thousand hits need not read a column of each.
        let hitCount = "SELECT count(*) FROM (\(searches("1")) LIMIT ?)"
        let candidates = "SELECT count(*), group_concat(CASE WHEN \(rtreeExact) THEN r.id END) "
            + "FROM (SELECT * FROM \(rtree) WHERE \(box) LIMIT ?) r"
        return GeoTexts(rtree: rtree, exact: exact, generic: generic, rtreeExact: rtreeExact, hitCount: hitCount,
                        candidates: candidates)
    }
}
