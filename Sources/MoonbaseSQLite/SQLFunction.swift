import CSQLite
import MoonbaseCore
import MoonbaseJSON

#if canImport(Glibc)
import Glibc
#endif

/// A scalar SQL function implemented in Swift, installed on every connection of a `Database`
/// (`Database.register(_:)`). The store uses it for the array operators (`AddUnique`, `Remove`),
/// which must run inside the single UPDATE statement to stay atomic.
///
/// A thrown `ParseError` becomes an SQLite error `mb<code>: message`, which
/// `SQLiteError.parseError` maps back to the same Parse code.
public struct SQLFunction: Sendable {
    public let name: String
    public let argumentCount: Int32
    public let deterministic: Bool
    public let body: @Sendable ([SQLiteValue]) throws(ParseError) -> SQLiteValue

    public init(name: String, argumentCount: Int32, deterministic: Bool = true,
                body: @escaping @Sendable ([SQLiteValue]) throws(ParseError) -> SQLiteValue) {
        self.name = name
        self.argumentCount = argumentCount
        self.deterministic = deterministic
        self.body = body
    }
}

/// Heap box for a function handed to SQLite as `pApp`; released by `xDestroy`.
private final class FunctionBox {
    let function: SQLFunction
    init(_ f: SQLFunction) { function = f }
}

func sqliteArgument(_ v: OpaquePointer?) -> SQLiteValue {
    switch sqlite3_value_type(v) {
    case SQLITE_INTEGER: return .integer(sqlite3_value_int64(v))
    case SQLITE_FLOAT: return .real(sqlite3_value_double(v))
    case SQLITE_TEXT:
        let n = Int(sqlite3_value_bytes(v))
        guard let p = sqlite3_value_text(v) else { return .text("") }
        return .text(String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self))
    case SQLITE_BLOB:
        let n = Int(sqlite3_value_bytes(v))
        guard let p = sqlite3_value_blob(v) else { return .blob([]) }
        return .blob(Array(UnsafeRawBufferPointer(start: p, count: n)))
    default: return .null
    }
}

func sqliteResult(_ ctx: OpaquePointer?, _ value: SQLiteValue) {
    switch value {
    case .null: sqlite3_result_null(ctx)
    case .integer(let i): sqlite3_result_int64(ctx, i)
    case .real(let d): sqlite3_result_double(ctx, d)
    case .text(var s): s.withUTF8 { buf in
        buf.withMemoryRebound(to: CChar.self) { sqlite3_result_text(ctx, $0.baseAddress, Int32($0.count), sqliteTransient) }
    }
    case .blob(let b): b.withUnsafeBytes { sqlite3_result_blob(ctx, $0.baseAddress, Int32($0.count), sqliteTransient) }
    }
}

func sqliteResultError(_ ctx: OpaquePointer?, _ error: ParseError) {
    sqlite3_result_error(ctx, "mb\(error.code.rawValue): \(error.message)", -1)
}

private let swiftFunctionCallback: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = { ctx, argc, argv in
    let box = Unmanaged<FunctionBox>.fromOpaque(sqlite3_user_data(ctx)!).takeUnretainedValue()
    var args: [SQLiteValue] = []
    args.reserveCapacity(Int(argc))
    for i in 0..<Int(argc) { args.append(sqliteArgument(argv?[i])) }
    do throws(ParseError) {
        sqliteResult(ctx, try box.function.body(args))
    } catch {
        sqliteResultError(ctx, error)
    }
}

private let functionBoxDestroy: @convention(c) (UnsafeMutableRawPointer?) -> Void = { p in
    if let p { Unmanaged<FunctionBox>.fromOpaque(p).release() }
}

extension Connection {
    /// Installs a Swift scalar function on this connection.
    public func install(_ f: SQLFunction) throws(ParseError) {
        let box = Unmanaged.passRetained(FunctionBox(f)).toOpaque()
        var flags = SQLITE_UTF8
        if f.deterministic { flags |= SQLITE_DETERMINISTIC }
        // On failure SQLite calls xDestroy itself, so the box is not leaked.
        let rc = sqlite3_create_function_v2(handle, f.name, f.argumentCount, flags, box,
                                            swiftFunctionCallback, nil, nil, functionBoxDestroy)
        guard rc == SQLITE_OK else { throw Connection.error(handle, rc, sql: nil).parseError }
    }

    /// `regexp(pattern, text[, options])`, `geo_distance(lat1, lng1, lat2, lng2)`,
    /// `geo_point_distance(json, field, lat, lng)` and `geo_point_in_box(json, field, s, n, w, e)`.
    func installBuiltinFunctions() throws(ParseError) {
        let flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC
        for argc: Int32 in [2, 3] {
            let cache = Unmanaged.passRetained(RegexCache()).toOpaque()
            let rc = sqlite3_create_function_v2(handle, "regexp", argc, flags, cache, regexpCallback, nil, nil, regexCacheDestroy)
            guard rc == SQLITE_OK else { throw Connection.error(handle, rc, sql: nil).parseError }
        }
        let geo: [(String, Int32, @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void)] = [
            ("geo_distance", 4, geoDistanceCallback), ("geo_point_distance", 4, geoPointDistanceCallback),
            ("geo_point_in_box", 6, geoPointInBoxCallback),
        ]
        for (name, argc, callback) in geo {
            let rc = sqlite3_create_function_v2(handle, name, argc, flags | SQLITE_INNOCUOUS, nil, callback, nil, nil, nil)
            guard rc == SQLITE_OK else { throw Connection.error(handle, rc, sql: nil).parseError }
        }
    }
}

// MARK: geo_distance

/// Great-circle distance in radians between two points given in degrees (haversine).
public func geoDistanceRadians(lat1: Double, lng1: Double, lat2: Double, lng2: Double) -> Double {
    let d2r = Double.pi / 180
    let p1 = lat1 * d2r, p2 = lat2 * d2r
    let dp = (lat2 - lat1) * d2r, dl = (lng2 - lng1) * d2r
    let a = sin(dp / 2) * sin(dp / 2) + cos(p1) * cos(p2) * sin(dl / 2) * sin(dl / 2)
    return 2 * asin(min(1, a.squareRoot()))
}

/// A numeric argument as a double (text that looks like a number counts, as in arithmetic);
/// nil for NULL, blobs and other text.
@inline(__always) private func numericArgument(_ v: OpaquePointer?) -> Double? {
    let t = sqlite3_value_numeric_type(v)
    return t == SQLITE_INTEGER || t == SQLITE_FLOAT ? sqlite3_value_double(v) : nil
}

private let geoDistanceCallback: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = { ctx, argc, argv in
    guard let argv, let lat1 = numericArgument(argv[0]), let lng1 = numericArgument(argv[1]),
          let lat2 = numericArgument(argv[2]), let lng2 = numericArgument(argv[3]) else { sqlite3_result_null(ctx); return }
    sqlite3_result_double(ctx, geoDistanceRadians(lat1: lat1, lng1: lng1, lat2: lat2, lng2: lng2))
}

// MARK: geo_point_distance, geo_point_in_box

/// The point stored under the top-level key `field` of the JSON object `json`: the numbers
/// `json_extract(json, '$.field.latitude')` and `'$.field.longitude'` return, read in one pass
/// (`JSONPoint`) instead of two whole-document parses. nil when either is missing.
@inline(__always) private func storedPoint(_ json: OpaquePointer?, _ field: OpaquePointer?) -> (latitude: Double, longitude: Double)? {
    guard sqlite3_value_type(json) == SQLITE_TEXT, let j = sqlite3_value_text(json), let f = sqlite3_value_text(field) else { return nil }
    return JSONPoint.read(j, count: Int(sqlite3_value_bytes(json)), key: f, keyCount: Int(sqlite3_value_bytes(field)))
}

/// `geo_point_distance(json, field, lat, lng)`: `geo_distance` from the stored point to
/// (lat, lng), NULL without a point. A geo query's exact test on every row it reads.
private let geoPointDistanceCallback: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = { ctx, argc, argv in
    guard let argv, let p = storedPoint(argv[0], argv[1]),
          let lat = numericArgument(argv[2]), let lng = numericArgument(argv[3]) else { sqlite3_result_null(ctx); return }
    sqlite3_result_double(ctx, geoDistanceRadians(lat1: p.latitude, lng1: p.longitude, lat2: lat, lng2: lng))
}

/// `geo_point_in_box(json, field, south, north, west, east)`: 1 when the stored point is in the
/// box (edges included), 0 when not, NULL without a point. `west > east` is a box across the
/// antimeridian: longitudes ≥ west or ≤ east.
private let geoPointInBoxCallback: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = { ctx, argc, argv in
    guard let argv, let p = storedPoint(argv[0], argv[1]), let s = numericArgument(argv[2]), let n = numericArgument(argv[3]),
          let w = numericArgument(argv[4]), let e = numericArgument(argv[5]) else { sqlite3_result_null(ctx); return }
    let inLng = w <= e ? (p.longitude >= w && p.longitude <= e) : (p.longitude >= w || p.longitude <= e)
    sqlite3_result_int(ctx, p.latitude >= s && p.latitude <= n && inLng ? 1 : 0)
}
