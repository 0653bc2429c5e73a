import MoonbaseCore
import MoonbaseJSON

/// The type a field took with its first value; later writes must match it (111 otherwise).
///
/// Raw values are Parse's schema type names, as `GET /parse/schemas/CLASS` reports them.
public enum FieldType: String, Sendable, Hashable, CaseIterable {
    case string = "String"
    case number = "Number"
    case boolean = "Boolean"
    case date = "Date"
    case geoPoint = "GeoPoint"
    case pointer = "Pointer"
    case file = "File"
    case array = "Array"
    case object = "Object"
    case acl = "ACL"
    case bytes = "Bytes"
    case polygon = "Polygon"
    case relation = "Relation"
}

/// A field of a class: its type, and for pointers the target class.
public struct FieldInfo: Sendable, Hashable {
    public var type: FieldType
    public var targetClass: String?
    public init(type: FieldType, targetClass: String? = nil) {
        self.type = type
        self.targetClass = targetClass
    }
}

/// Naming of the SQL objects behind a class. Every name here is built from validated class and
/// field names only (`Naming.isValidClassName`/`isValidFieldName`), and always double-quoted.
///
/// Layout of a class table:
/// ```sql
/// CREATE TABLE "Post"(
///   rid INTEGER PRIMARY KEY,          -- rowid: key of the R*Tree and FTS5 side tables
///   objectId TEXT NOT NULL UNIQUE,    -- 10 random alphanumerics
///   createdAt INTEGER NOT NULL,       -- ms since epoch (indexed)
///   updatedAt INTEGER NOT NULL,       -- ms since epoch
///   ACL TEXT,                         -- the ACL JSON as given, NULL = public
///   rperm TEXT,                       -- '|*|uid1|uid2|' readers, NULL = public read
///   wperm TEXT,                       -- '|*|uid1|' writers, NULL = public write
///   data TEXT NOT NULL                -- JSON object of the remaining fields
/// );
/// ```
public enum Naming {
    /// Internal tables start with this prefix; class names may not.
    public static let internalPrefix = "_mb_"
    public static let systemClasses: Set<String> = ["_User", "_Session", "_JobStatus", "_Usage", "_Installation", "_Role"]

    /// `^[A-Za-z][A-Za-z0-9_]*$`, no `__`, at most 64 characters; a leading `_` only for system classes.
    /// (Checked on every query and write: one pass over the bytes, no allocation; a leading `_`
    /// can only be a system class, since an identifier starts with a letter.)
    public static func isValidClassName(_ name: String) -> Bool {
        if name.utf8.first == UInt8(ascii: "_") { return systemClasses.contains(name) }
        return isIdentifier(name, maxLength: 64, doubleUnderscore: false) && !isReservedTableName(name)
    }

    /// Throws 103 "invalid class name" unless `isValidClassName` (queries on either backend).
    public static func requireValidClassName(_ name: String) throws(ParseError) {
        guard isValidClassName(name) else { throw ParseError(.invalidClassName, "invalid class name: \(name)") }
    }

    /// `^[A-Za-z][A-Za-z0-9_]*$`, at most 64 characters.
    public static func isValidFieldName(_ name: String) -> Bool { isIdentifier(name, maxLength: 64) }

    /// A dotted path of valid field names (`a.b.c`), for nested keys in queries, `keys` and `include`.
    public static func isValidFieldPath(_ path: String) -> Bool {
        var parts = 0, length = 0
        for c in path.utf8 {
            if c == UInt8(ascii: ".") {
                guard length > 0 else { return false }
                parts += 1
                length = 0
                continue
            }
            if length == 0 { guard isLetter(c) else { return false } }
            else { guard isLetter(c) || isDigit(c) || c == UInt8(ascii: "_") else { return false } }
            length += 1
            guard length <= 64 else { return false }
        }
        return length > 0 && parts + 1 <= 8
    }

    @inline(__always) static func isLetter(_ c: UInt8) -> Bool { (c >= 65 && c <= 90) || (c >= 97 && c <= 122) }
    @inline(__always) static func isDigit(_ c: UInt8) -> Bool { c >= 48 && c <= 57 }

    /// `^[A-Za-z][A-Za-z0-9_]*$` of at most `maxLength` bytes (and without `__` unless allowed).
    static func isIdentifier(_ s: String, maxLength: Int, doubleUnderscore: Bool = true) -> Bool {
        var n = 0
        var previous: UInt8 = 0
        for c in s.utf8 {
            if n == 0 { guard isLetter(c) else { return false } }
            else { guard isLetter(c) || isDigit(c) || c == UInt8(ascii: "_") else { return false } }
            if !doubleUnderscore && c == UInt8(ascii: "_") && previous == UInt8(ascii: "_") { return false }
            n += 1
            guard n <= maxLength else { return false }
            previous = c
        }
        return n > 0
    }

    /// `"Post"`.
    public static func table(_ className: String) -> String { "\"\(className)\"" }
    /// R*Tree side table of a GeoPoint field: `"Post__geo__location"` (id = class rid).
    public static func geoTable(_ className: String, _ field: String) -> String { "\"\(className)__geo__\(field)\"" }
    /// FTS5 table of a text index: `"Post__fts__<indexName>"` (rowid = class rid).
    public static func ftsTable(_ className: String, _ indexName: String) -> String { "\"\(className)__fts__\(indexName)\"" }

    /// The canonical SQL expression reading a field (dotted path allowed) of a class row, as
    /// queries and expression indexes must both spell it for SQLite to use the index:
    /// a Pointer compares by its objectId, a Date by its ISO text (canonical, so text order is
    /// time order), anything else by its JSON value. `objectId`, `createdAt`, `updatedAt` are
    /// columns. Path literals are safe: names are validated before they get here.
    public static func fieldExpr(_ path: String, type: FieldType?) -> String {
        switch path {
        case "objectId", "createdAt", "updatedAt": return path
        default: break
        }
        switch type {
        case .pointer?: return "json_extract(data,'$.\(path).objectId')"
        case .date?: return "json_extract(data,'$.\(path).iso')"
        default: return "json_extract(data,'$.\(path)')"
        }
    }
}
