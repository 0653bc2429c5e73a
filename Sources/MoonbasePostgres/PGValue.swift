/// A value sent to, or read from, PostgreSQL.
///
/// Parameters travel in libpq's text format with a type OID for the typed cases, so `$1` is
/// never spliced into SQL text. Rows are read in text format and decoded by column type:
/// `int2/int4/int8/oid` → `.integer`, `float4/float8` → `.real`, `bool` → `.bool`,
/// `json/jsonb` → `.json` (the document's UTF-8 bytes), everything else → `.text`.
///
/// ```swift
/// try conn.execute("INSERT INTO t(id, doc) VALUES ($1, $2)", [.text("a"), .json(Array(#"{"x":1}"#.utf8))])
/// ```
public enum PGValue: Sendable, Hashable {
    case null
    case text(String)
    case integer(Int64)
    case real(Double)
    case bool(Bool)
    /// A JSON document (sent as `jsonb`, read from `json`/`jsonb` columns) as UTF-8 bytes.
    case json([UInt8])

    /// The text, when this is `.text`.
    public var string: String? {
        if case .text(let s) = self { return s }
        return nil
    }

    /// The integer, when this is `.integer`.
    public var int64: Int64? {
        if case .integer(let n) = self { return n }
        return nil
    }

    /// The JSON text, when this is `.json`.
    public var jsonString: String? {
        if case .json(let b) = self { return String(decoding: b, as: UTF8.self) }
        return nil
    }

    /// Type OIDs from PostgreSQL's `pg_type` catalogue (stable across versions).
    enum OID {
        static let bool: UInt32 = 16, int8: UInt32 = 20, int2: UInt32 = 21, int4: UInt32 = 23
        static let oid: UInt32 = 26, json: UInt32 = 114, float4: UInt32 = 700, float8: UInt32 = 701
        static let jsonb: UInt32 = 3802
    }

    /// The OID sent with a parameter: 0 lets the server infer `.text` from its context (a text
    /// literal's type is "unknown" too, so `$1` fits a `text`, `varchar` or `bigint` column alike).
    var parameterType: UInt32 {
        switch self {
        case .null, .text: return 0
        case .integer: return OID.int8
        case .real: return OID.float8
        case .bool: return OID.bool
        case .json: return OID.jsonb
        }
    }

    /// The parameter in text format (nil for SQL NULL).
    var parameterText: [UInt8]? {
        switch self {
        case .null: return nil
        case .text(let s): return Array(s.utf8)
        case .integer(let n): return Array(String(n).utf8)
        case .real(let d):
            if d.isNaN { return Array("NaN".utf8) }
            if d.isInfinite { return Array((d < 0 ? "-Infinity" : "Infinity").utf8) }
            return Array("\(d)".utf8)
        case .bool(let b): return Array((b ? "t" : "f").utf8)
        case .json(let bytes): return bytes
        }
    }

    /// Decodes one field of a text-format result.
    static func decode(_ bytes: UnsafeBufferPointer<UInt8>, type: UInt32) -> PGValue {
        switch type {
        case OID.int2, OID.int4, OID.int8, OID.oid:
            if let n = Int64(String(decoding: bytes, as: UTF8.self)) { return .integer(n) }
        case OID.float4, OID.float8:
            let s = String(decoding: bytes, as: UTF8.self)
            switch s {
            case "NaN": return .real(.nan)
            case "Infinity": return .real(.infinity)
            case "-Infinity": return .real(-.infinity)
            default: if let d = Double(s) { return .real(d) }
            }
        case OID.bool:
            return .bool(bytes.first == UInt8(ascii: "t"))
        case OID.json, OID.jsonb:
            return .json(Array(bytes))
        default:
            break
        }
        return .text(String(decoding: bytes, as: UTF8.self))
    }
}
