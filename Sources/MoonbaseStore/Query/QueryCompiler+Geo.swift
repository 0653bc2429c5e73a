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
    /// coordinates (great-circle distance through `geo_distance`, or the exact box). At the top
    /// level the filter is also recorded in `state.geo` for the planner.
    func geo(_ field: FieldRef, _ op: String, _ raw: JSONValue, ops: JSONObject, depth: Int, state: State) throws(ParseError) -> Frag {
        let filter: GeoFilter
        let lat = "json_extract(data,'$.\(field.path).latitude')", lng = "json_extract(data,'$.\(field.path).longitude')"
        let rtree = Naming.geoTable(schema.className, field.path)
        switch op {
        case "$nearSphere":
            guard case .geoPoint(let cLat, let cLng) = try QueryValue.geoPoint(raw) else { return .alwaysFalse }
            var radius: Double?
            for (key, scale) in [("$maxDistance", 1.0), ("$maxDistanceInRadians", 1.0),
                                 ("$maxDistanceInMiles", 1 / EarthRadius.miles),
                                 ("$maxDistanceInKilometers", 1 / EarthRadius.kilometers)] {
                guard let v = ops[key] else { continue }
                guard let d = v.doubleValue, d >= 0, d.isFinite else {
                    throw ParseError(.invalidQuery, "\(key) needs a non-negative number")
                }
                radius = d * scale
            }
            if let r = radius {
                filter = GeoFilter(field: field.path, rtree: rtree, boxes: Self.boxes(aroundLatitude: cLat, longitude: cLng, radians: r),
                                   exactSQL: "geo_distance(\(lat),\(lng),?,?) <= ?",
                                   exactBinds: [.real(cLat), .real(cLng), .real(r)], center: (cLat, cLng))
            } else {
                filter = GeoFilter(field: field.path, rtree: rtree, boxes: [Self.world], exactSQL: "\(lat) IS NOT NULL",
                                   exactBinds: [], center: (cLat, cLng))
            }
        case "$within", "$geoWithin":
            guard let spec = raw.objectValue, spec.count == 1, let shape = spec.entries.first else {
                throw ParseError(.invalidQuery, "\(op) needs exactly one of $box or $centerSphere")
            }
            switch shape.key {
            case "$box":
                guard let pts = shape.value.arrayValue, pts.count == 2,
                      case .geoPoint(let sLat, let wLng) = try QueryValue.geoPoint(pts[0]),
                      case .geoPoint(let nLat, let eLng) = try QueryValue.geoPoint(pts[1]) else {
                    throw ParseError(.invalidQuery, "$box needs [southwest, northeast] GeoPoints")
                }
                guard sLat <= nLat else { throw ParseError(.invalidQuery, "$box: the southwest corner must be south of the northeast corner") }
                let boxes = wLng <= eLng
                    ? [GeoBox(south: sLat, north: nLat, west: wLng, east: eLng)]
                    : [GeoBox(south: sLat, north: nLat, west: wLng, east: 180), GeoBox(south: sLat, north: nLat, west: -180, east: eLng)]
                var sql = "\(lat) BETWEEN ? AND ? AND "
                var binds: [SQLiteValue] = [.real(sLat), .real(nLat)]
                if boxes.count == 1 {
                    sql += "\(lng) BETWEEN ? AND ?"
                    binds += [.real(wLng), .real(eLng)]
                } else {
                    sql += "(\(lng) >= ? OR \(lng) <= ?)"
                    binds += [.real(wLng), .real(eLng)]
                }
                filter = GeoFilter(field: field.path, rtree: rtree, boxes: boxes, exactSQL: sql, exactBinds: binds, center: nil)
            case "$centerSphere" where op == "$geoWithin":
                guard let a = shape.value.arrayValue, a.count == 2, let r = a[1].doubleValue, r >= 0, r.isFinite else {
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
                filter = GeoFilter(field: field.path, rtree: rtree, boxes: Self.boxes(aroundLatitude: cLat, longitude: cLng, radians: r),
                                   exactSQL: "geo_distance(\(lat),\(lng),?,?) <= ?",
                                   exactBinds: [.real(cLat), .real(cLng), .real(r)], center: nil)
            case "$polygon" where op == "$geoWithin":
                let given = shape.value.parseType == "Polygon" ? (shape.value["coordinates"] ?? .null) : shape.value
                let pts = try Polygon.parsePoints(given, what: "$polygon", code: .invalidQuery)
                let box = GeoBox(south: pts.map(\.0).min()!, north: pts.map(\.0).max()!,
                                 west: pts.map(\.1).min()!, east: pts.map(\.1).max()!)
                let coords = JSONValue.array(pts.map { .array([.double($0.0), .double($0.1)]) }).jsonString
                filter = GeoFilter(field: field.path, rtree: rtree, boxes: [box], exactSQL: "mb_polygon_contains(?,\(lat),\(lng)) = 1",
                                   exactBinds: [.text(coords)], center: nil)
            default:
                throw ParseError(.invalidQuery, "unsupported \(op) shape \(shape.key): use $box, $centerSphere or $polygon")
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
        // A polygon's bounding box is no area of its own: the planner's box shortcuts (cells or
        // R*Tree coordinates inside the box count as matches) do not hold, so it stays generic.
        let isPolygon = filter.exactSQL.hasPrefix("mb_polygon_contains")
        if dialect == .postgres { return try pgGeo(filter, op: op, isPolygon: isPolygon, depth: depth, state: state) }
        if depth == 0, state.geo == nil, !isPolygon {
            var circle: (lat: Double, lng: Double, r: Double)?
            if filter.exactSQL.hasPrefix("geo_distance"), case .real(let la) = filter.exactBinds[0],
               case .real(let ln) = filter.exactBinds[1], case .real(let r) = filter.exactBinds[2] {
                circle = (la, ln, r)
            }
            state.geo = withRTreeTest(filter, circle: circle)
        }
        return Self.genericGeo(filter)
    }

    /// Margin (radians) around a circle's edge inside which R*Tree coordinates are not trusted:
    /// a 32-bit float ulp at 180° is 1.5e-5° ≈ 2.7e-7 rad, so 1e-6 rad is conclusive everywhere.
    static let rtreeMargin = 1e-6

    /// Adds the R*Tree-based exact test (`GeoFilter.rtreeExactSQL`). It reads only the R*Tree
    /// row `r`; in the rare undecided case it reads the stored point through a subquery by rid, so
    /// it also works inside an R*Tree-only subquery.
    func withRTreeTest(_ g: GeoFilter, circle: (lat: Double, lng: Double, r: Double)?) -> GeoFilter {
        var g = g
        g.circle = circle.map { GeoCircle(latitude: $0.lat, longitude: $0.lng, radians: $0.r) }
        let fallback = "(SELECT \(g.exactSQL) FROM \(Naming.table(schema.className)) WHERE rid = r.id)"
        if let c = circle {
            let d = "geo_distance(r.minLat,r.minLng,?,?)"
            g.rtreeExactSQL = "CASE WHEN \(d) <= ? THEN 1 WHEN \(d) > ? THEN 0 ELSE \(fallback) END"
            g.rtreeExactBinds = [.real(c.lat), .real(c.lng), .real(c.r - Self.rtreeMargin), .real(c.lat), .real(c.lng), .real(c.r + Self.rtreeMargin)]
                + g.exactBinds
        } else if g.boxes.count == 1 {
            let b = g.boxes[0]
            // Inside even after outward rounding → inside; otherwise ask the stored coordinates.
            g.rtreeExactSQL = "((r.minLat >= ? AND r.maxLat <= ? AND r.minLng >= ? AND r.maxLng <= ?) OR \(fallback))"
            g.rtreeExactBinds = [.real(b.south), .real(b.north), .real(b.west), .real(b.east)] + g.exactBinds
        } else {
            g.rtreeExactSQL = fallback
            g.rtreeExactBinds = g.exactBinds
        }
        return g
    }

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

    /// The R*Tree test as a `rid IN (…)` candidate set, AND-ed with the exact test.
    static func genericGeo(_ g: GeoFilter) -> Frag {
        var sub: [String] = []
        var binds: [SQLiteValue] = []
        for b in g.boxes {
            sub.append("SELECT id FROM \(g.rtree) WHERE maxLat >= ? AND minLat <= ? AND maxLng >= ? AND minLng <= ?")
            binds += [.real(b.south), .real(b.north), .real(b.west), .real(b.east)]
        }
        return Frag("rid IN (\(sub.joined(separator: " UNION ALL "))) AND \(g.exactSQL)", binds + g.exactBinds)
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
