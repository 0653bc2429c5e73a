import CSQLite
import MoonbaseCore

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

    /// `regexp(pattern, text[, options])` and `geo_distance(lat1, lng1, lat2, lng2)`.
    func installBuiltinFunctions() throws(ParseError) {
        let flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC
        for argc: Int32 in [2, 3] {
            let cache = Unmanaged.passRetained(RegexCache()).toOpaque()
            let rc = sqlite3_create_function_v2(handle, "regexp", argc, flags, cache, regexpCallback, nil, nil, regexCacheDestroy)
            guard rc == SQLITE_OK else { throw Connection.error(handle, rc, sql: nil).parseError }
        }
        let rc = sqlite3_create_function_v2(handle, "geo_distance", 4, flags | SQLITE_INNOCUOUS, nil, geoDistanceCallback, nil, nil, nil)
        guard rc == SQLITE_OK else { throw Connection.error(handle, rc, sql: nil).parseError }
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

private let geoDistanceCallback: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = { ctx, argc, argv in
    var v = [Double](repeating: 0, count: 4)
    for i in 0..<4 {
        let arg = argv?[i]
        let t = sqlite3_value_numeric_type(arg)
        guard t == SQLITE_INTEGER || t == SQLITE_FLOAT else { sqlite3_result_null(ctx); return }
        v[i] = sqlite3_value_double(arg)
    }
    sqlite3_result_double(ctx, geoDistanceRadians(lat1: v[0], lng1: v[1], lat2: v[2], lng2: v[3]))
}
