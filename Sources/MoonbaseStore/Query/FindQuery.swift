import MoonbaseCore
import MoonbaseJSON

/// One sort key of `order`: a field (or `$score`) and a direction.
public struct SortKey: Sendable, Equatable {
    public var field: String
    public var descending: Bool
    public init(field: String, descending: Bool) { self.field = field; self.descending = descending }
}

/// A validated find request: Parse's query parameters from REST (`GET /parse/classes/C?…`) or
/// from a Lua options table (`db.find(C, where, {order=…, limit=…})`), both given as JSON.
///
/// Validation: `limit`/`skip` must be non-negative integers (102 otherwise); `limit` above the
/// caller's cap is capped (1,000 for REST, 10,000 for Lua); `order`, `keys` and `include` name
/// valid field paths (105 otherwise); `include` paths are at most 3 levels deep.
public struct FindQuery: Sendable {
    public var className: String
    public var whereClause: JSONValue?
    public var order: [SortKey]
    public var limit: Int
    public var skip: Int
    /// Projection (dotted paths allowed); nil = all fields.
    public var keys: [String]?
    /// Pointer paths to expand (dotted, ≤ 3 levels).
    public var include: [String]
    /// Fields left out of each result (`excludeKeys`, dotted paths allowed).
    public var excludeKeys: [String] = []
    public var count: Bool
    /// The class permission the read is checked against: `get` for a fetch by id, `count` for a
    /// count-only query, else `find` (pointer permissions differ per operation).
    public var operation: ClassOperation = .find
    /// `redirectClassNameForKey`: query the target class of this Relation field of `className`
    /// instead (with `$relatedTo`); resolved by the object service.
    public var redirectClassNameForKey: String?

    public static let defaultLimit = 100
    public static let restMaxLimit = 1000
    public static let luaMaxLimit = 10_000
    public static let maxSkip = 10_000_000
    public static let maxIncludeDepth = 3

    public init(className: String, where whereClause: JSONValue? = nil, order: [SortKey] = [], limit: Int = FindQuery.defaultLimit,
                skip: Int = 0, keys: [String]? = nil, include: [String] = [], count: Bool = false) {
        self.className = className
        self.whereClause = whereClause
        self.order = order
        self.limit = limit
        self.skip = skip
        self.keys = keys
        self.include = include
        self.count = count
    }

    /// Parses REST query parameters (every value a string; `where` is JSON text).
    public init(className: String, rest params: [String: String], maxLimit: Int = FindQuery.restMaxLimit) throws(ParseError) {
        var obj = JSONObject()
        for (k, v) in params.sorted(by: { $0.key < $1.key }) {
            if k == "where" {
                guard !v.isEmpty else { continue }
                obj[k] = try JSON.parse(v)
            } else {
                obj[k] = .string(v)
            }
        }
        try self.init(className: className, options: obj, maxLimit: maxLimit)
    }

    /// Parses an options object: `where` (object or JSON text), `order` (string or array of
    /// strings), `limit`/`skip` (integers or numeric strings), `keys`/`include` (comma list or
    /// array), `count` (bool, 1/0 or "1"/"true"). Unknown options are ignored (the API layer
    /// passes its own, such as `master`).
    public init(className: String, options: JSONObject, maxLimit: Int) throws(ParseError) {
        guard Naming.isValidClassName(className) else {
            throw ParseError(.invalidClassName, "invalid class name: \(className)")
        }
        self.className = className
        switch options["where"] {
        case nil, .null?: whereClause = nil
        case .string(let s)?: whereClause = s.isEmpty ? nil : try JSON.parse(s)
        case .object(let o)?: whereClause = .object(o)
        default: throw ParseError(.invalidQuery, "where must be a JSON object")
        }
        if let w = whereClause, w.objectValue == nil { throw ParseError(.invalidQuery, "where must be a JSON object") }
        limit = min(try Self.nonNegative(options["limit"], name: "limit") ?? Self.defaultLimit, maxLimit)
        skip = try Self.nonNegative(options["skip"], name: "skip") ?? 0
        guard skip <= Self.maxSkip else { throw ParseError(.invalidQuery, "skip above \(Self.maxSkip)") }
        order = []
        for item in try Self.list(options["order"], name: "order") {
            let desc = item.hasPrefix("-")
            let name = desc ? String(item.dropFirst()) : item
            guard name == "$score" || Naming.isValidFieldPath(name) else {
                throw ParseError(.invalidKeyName, "invalid field name in order: \(name)")
            }
            order.append(SortKey(field: name, descending: desc))
        }
        if options["keys"] != nil {
            let k = try Self.list(options["keys"], name: "keys")
            for p in k where !Naming.isValidFieldPath(p) { throw ParseError(.invalidKeyName, "invalid field name in keys: \(p)") }
            keys = k
        } else {
            keys = nil
        }
        excludeKeys = try Self.list(options["excludeKeys"], name: "excludeKeys")
        for p in excludeKeys where !Naming.isValidFieldPath(p) {
            throw ParseError(.invalidKeyName, "invalid field name in excludeKeys: \(p)")
        }
        include = try Self.list(options["include"], name: "include")
        for p in include {
            guard Naming.isValidFieldPath(p) else { throw ParseError(.invalidKeyName, "invalid field name in include: \(p)") }
            guard p.split(separator: ".").count <= Self.maxIncludeDepth else {
                throw ParseError(.invalidQuery, "include paths are limited to \(Self.maxIncludeDepth) levels: \(p)")
            }
        }
        if let r = options["redirectClassNameForKey"], !r.isNull {
            guard let key = r.stringValue, Naming.isValidFieldName(key) else {
                throw ParseError(.invalidKeyName, "invalid field name in redirectClassNameForKey")
            }
            redirectClassNameForKey = key
        }
        switch options["count"] {
        case nil, .null?: count = false
        case .bool(let b)?: count = b
        case .int(let i)?: count = i != 0
        case .string(let s)? where ["1", "true"].contains(s): count = true
        case .string(let s)? where ["0", "false", ""].contains(s): count = false
        default: throw ParseError(.invalidQuery, "count must be 1 or true")
        }
    }

    static func nonNegative(_ v: JSONValue?, name: String) throws(ParseError) -> Int? {
        switch v {
        case nil, .null?: return nil
        case .int(let i)? where i >= 0: return Int(min(i, Int64(Int32.max)))
        case .double(let d)? where d >= 0 && d == d.rounded() && d < 2e9: return Int(d)
        case .string(let s)?:
            if let i = Int(s), i >= 0 { return min(i, Int(Int32.max)) }
            // Digits too many for 64 bits are still a non-negative integer: capped like any
            // value above the maximum.
            if !s.isEmpty, s.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) { return Int(Int32.max) }
            throw ParseError(.invalidQuery, "\(name) must be a non-negative integer")
        case .double(let d)? where d >= 0 && d == d.rounded(): return Int(Int32.max)
        default: throw ParseError(.invalidQuery, "\(name) must be a non-negative integer")
        }
    }

    /// A comma list or an array of strings; empty items are dropped.
    static func list(_ v: JSONValue?, name: String) throws(ParseError) -> [String] {
        switch v {
        case nil, .null?: return []
        case .string(let s)?:
            return commaList(s)
        case .array(let a)?:
            var out: [String] = []
            for x in a {
                guard let s = x.stringValue else { throw ParseError(.invalidQuery, "\(name) must be a list of strings") }
                out.append(contentsOf: commaList(s))
            }
            return out
        default: throw ParseError(.invalidQuery, "\(name) must be a string or an array of strings")
        }
    }

    /// The items of a comma-separated list (`order=-createdAt,title`), each without its leading
    /// and trailing spaces, empty ones dropped. Split on the bytes: a comma and a space are ASCII,
    /// so every piece stays valid UTF-8, and a Character-wise `split` cost a map query ~4,400
    /// instructions for `-createdAt`.
    static func commaList(_ s: String) -> [String] {
        var out: [String] = []
        var s = s
        s.withUTF8 { b in
            var start = 0
            while start <= b.count {
                var end = start
                while end < b.count && b[end] != UInt8(ascii: ",") { end += 1 }
                var lo = start, hi = end
                while lo < hi && b[lo] == UInt8(ascii: " ") { lo += 1 }
                while hi > lo && b[hi - 1] == UInt8(ascii: " ") { hi -= 1 }
                if hi > lo { out.append(String(decoding: UnsafeBufferPointer(rebasing: b[lo..<hi]), as: UTF8.self)) }
                start = end + 1
            }
        }
        return out
    }
}
