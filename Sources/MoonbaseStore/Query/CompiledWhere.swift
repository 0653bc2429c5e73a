import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// A `where` clause compiled to SQL text plus its bound parameters, in order.
///
/// `sql` is a boolean expression over the class table (aliased `t`), complete on its own.
/// Nothing from the request is in `sql`: values are in `binds`; field and class names reach the
/// text only through `Naming` after validation.
///
/// When the top level carries a geo constraint, `geo` describes it and `residualSQL`/`residualBinds`
/// hold every other top-level clause, so the planner can drive the query from the R*Tree instead
/// of using the generic form.
public struct CompiledWhere: Sendable, Equatable {
    public var sql: String
    public var binds: [SQLiteValue]
    /// The top-level geo constraint, if any (only one `$nearSphere`/`$within`/`$geoWithin` per query).
    public var geo: GeoFilter?
    /// The top-level `$text` constraint, if any (for `order=$score`).
    public var text: TextFilter?
    /// `sql` without the top-level geo clause (equal to `sql` when `geo` is nil).
    public var residualSQL: String
    public var residualBinds: [SQLiteValue]

    public init(sql: String, binds: [SQLiteValue], geo: GeoFilter? = nil, text: TextFilter? = nil,
                residualSQL: String? = nil, residualBinds: [SQLiteValue]? = nil) {
        self.sql = sql
        self.binds = binds
        self.geo = geo
        self.text = text
        self.residualSQL = residualSQL ?? sql
        self.residualBinds = residualBinds ?? binds
    }

    /// Matches every row.
    public static let all = CompiledWhere(sql: "1", binds: [])
}

/// A latitude/longitude rectangle; `west > east` never happens: boxes that cross the
/// antimeridian are split by `GeoFilter.boxes`.
public struct GeoBox: Sendable, Equatable {
    public var south: Double, north: Double, west: Double, east: Double
    public init(south: Double, north: Double, west: Double, east: Double) {
        self.south = south; self.north = north; self.west = west; self.east = east
    }

    /// south, north, west, east: the binds of every R*Tree search and box test over it.
    public var binds: [SQLiteValue] { [.real(south), .real(north), .real(west), .real(east)] }
}

/// A geo constraint on one GeoPoint field, resolved to R*Tree boxes and an exact test.
public struct GeoFilter: Sendable, Equatable {
    /// The GeoPoint field.
    public var field: String
    /// `Naming.geoTable(class, field)`.
    public var rtree: String { texts.rtree }
    /// Candidate rectangles (one, or two across the antimeridian). Their union covers the exact area.
    public var boxes: [GeoBox]
    /// Exact test over the row's stored coordinates (`t.data`), bound parameters in `exactBinds`.
    public var exactSQL: String
    public var exactBinds: [SQLiteValue]
    /// `$nearSphere` centre: results are nearest first unless `order` is given.
    public var center: (latitude: Double, longitude: Double)?
    /// The same exact test for plans that joined the R*Tree row `r`: decided from the R*Tree's
    /// coordinates (32-bit floats, rounded outward) when they are conclusive, falling back to
    /// `exactSQL` on the stored JSON only within float rounding of the edge. Skips parsing
    /// `data` for almost every candidate.
    public var rtreeExactSQL: String = ""
    public var rtreeExactBinds: [SQLiteValue] = []
    /// Every SQL text of this filter's shape (`GeoTexts`, kept once built): the planner's counts
    /// take theirs from here rather than building them per query.
    let texts: GeoTexts
    /// The exact area when it is a spherical cap (`$nearSphere` with a distance, `$centerSphere`);
    /// nil for boxes and unbounded `$nearSphere`. Set for the top-level filter only.
    public var circle: GeoCircle?

    public static func == (a: GeoFilter, b: GeoFilter) -> Bool {
        a.field == b.field && a.rtree == b.rtree && a.boxes == b.boxes && a.exactSQL == b.exactSQL
            && a.exactBinds == b.exactBinds && a.rtreeExactSQL == b.rtreeExactSQL && a.rtreeExactBinds == b.rtreeExactBinds
            && a.circle == b.circle
            && a.center?.latitude == b.center?.latitude
            && a.center?.longitude == b.center?.longitude
    }
}

/// A spherical cap: centre in degrees, radius in radians.
public struct GeoCircle: Sendable, Equatable {
    public var latitude: Double, longitude: Double, radians: Double
    public init(latitude: Double, longitude: Double, radians: Double) {
        self.latitude = latitude; self.longitude = longitude; self.radians = radians
    }
}

/// A `$text` constraint: the FTS5 table and the MATCH expression (bound, never spliced).
public struct TextFilter: Sendable, Equatable {
    public var ftsTable: String
    public var match: String
}

/// What the compiler needs to know about a class: its name, field types and text indexes.
public struct QuerySchema: Sendable {
    public var className: String
    public var fields: [String: FieldInfo]
    /// Text index name → the fields it covers (FTS5 table `Naming.ftsTable(className, name)`).
    public var textIndexes: [String: [String]]

    public init(className: String, fields: [String: FieldInfo], textIndexes: [String: [String]] = [:]) {
        self.className = className
        self.fields = fields
        self.textIndexes = textIndexes
    }
}
