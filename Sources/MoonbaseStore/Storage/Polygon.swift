import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// Parse's Polygon type: `{"__type":"Polygon","coordinates":[[lat,lng],…]}`, at least three
/// points, each latitude in −90…90 and longitude in −180…180. Stored as given (canonical
/// numbers); geometry is planar in latitude/longitude, the polygon closed implicitly.
enum Polygon {
    static let maxPoints = 1000

    static func canonical(_ o: JSONObject, field: String) throws(ParseError) -> JSONValue {
        guard let coords = o["coordinates"] else { throw ParseError(.incorrectType, "invalid Polygon for \(field): coordinates required") }
        let points = try parsePoints(coords, what: "Polygon for \(field)", code: .incorrectType)
        return ["__type": "Polygon", "coordinates": .array(points.map { .array([.double($0.0), .double($0.1)]) })]
    }

    /// `[[lat,lng],…]` or `[GeoPoint,…]`, at least 3 and at most `maxPoints`, in range.
    static func parsePoints(_ v: JSONValue, what: String, code: ParseErrorCode) throws(ParseError) -> [(Double, Double)] {
        guard let a = v.arrayValue, a.count >= 3, a.count <= maxPoints else {
            throw ParseError(code, "\(what) needs 3 to \(maxPoints) points")
        }
        var out: [(Double, Double)] = []
        for p in a {
            let lat: Double?, lng: Double?
            if let pair = p.arrayValue, pair.count == 2 {
                (lat, lng) = (pair[0].doubleValue, pair[1].doubleValue)
            } else if p.parseType == "GeoPoint" {
                (lat, lng) = (p["latitude"]?.doubleValue, p["longitude"]?.doubleValue)
            } else {
                (lat, lng) = (nil, nil)
            }
            guard let lat, let lng, lat >= -90, lat <= 90, lng >= -180, lng <= 180 else {
                throw ParseError(code, "\(what): each point must be [latitude, longitude] or a GeoPoint in range")
            }
            out.append((lat, lng))
        }
        return out
    }

    /// Whether (lat, lng) lies inside the polygon or on its edge (even-odd rule).
    static func contains(_ poly: [(Double, Double)], lat: Double, lng: Double) -> Bool {
        var inside = false
        var j = poly.count - 1
        for i in 0..<poly.count {
            let (yi, xi) = poly[i], (yj, xj) = poly[j]
            // On the segment: collinear and within its box.
            let cross = (xj - xi) * (lat - yi) - (yj - yi) * (lng - xi)
            if abs(cross) < 1e-12, lng >= min(xi, xj), lng <= max(xi, xj), lat >= min(yi, yj), lat <= max(yi, yj) { return true }
            if (yi > lat) != (yj > lat), lng < (xj - xi) * (lat - yi) / (yj - yi) + xi { inside.toggle() }
            j = i
        }
        return inside
    }
}

/// `mb_polygon_contains(coordinates JSON, lat, lng)`: 1 when the point is inside the polygon
/// (`[[lat,lng],…]`), 0 otherwise, NULL when either side is missing.
let polygonContainsFunction = SQLFunction(name: "mb_polygon_contains", argumentCount: 3) { (args) throws(ParseError) -> SQLiteValue in
    guard case .text(let t) = args[0] else { return .null }
    func num(_ v: SQLiteValue) -> Double? {
        switch v {
        case .integer(let i): return Double(i)
        case .real(let d): return d
        default: return nil
        }
    }
    guard let lat = num(args[1]), let lng = num(args[2]) else { return .null }
    guard let points = try? Polygon.parsePoints(try JSON.parse(t), what: "Polygon", code: .invalidQuery) else { return .null }
    return .integer(Polygon.contains(points, lat: lat, lng: lng) ? 1 : 0)
}
