import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore
#if canImport(Glibc)
import Glibc
#endif

/// A REST `where` compiled to a test on ONE object (the object in Parse's JSON shape, as the
/// master sees it), with the semantics of the SQL that REST find runs: typed equality (Date,
/// Pointer, File, GeoPoint), arrays containing scalars, `$lt $lte $gt $gte $ne $eq $in $nin
/// $all $exists $regex $options`, `$or $and $nor`, and the geo operators (`$nearSphere` with
/// `$maxDistance…`, `$within {$box}`, `$geoWithin {$box|$centerSphere}`).
///
/// Operators that need other objects or an index (`$text`, `$inQuery`, `$notInQuery`,
/// `$select`, `$dontSelect`, `$relatedTo`) are refused with 102 at compile time: a subscription
/// is never accepted and then silently unmatched.
///
/// ```swift
/// let m = try LiveMatcher(className: "Note", where: ["owner": "u1", "stars": ["$gte": 3]])
/// m.matches(object)   // Bool
/// ```
public struct LiveMatcher: Sendable {
    public let className: String
    let root: Node
    /// Top-level `field: scalar` equalities (the subscription registry indexes them).
    public let equalities: [(field: String, key: String)]

    /// Operators a single object cannot answer.
    public static let refused: Set<String> = ["$text", "$inQuery", "$notInQuery", "$select", "$dontSelect", "$relatedTo"]

    /// Compiles `where` (nil, null or `{}` match every object). When `schema` is given the
    /// where is also checked by the SQL compiler, so a subscription is refused exactly when a
    /// REST find would be (102/105/111).
    /// - Throws: 102 for refused or unknown operators and malformed operands.
    public init(className: String, where w: JSONValue?, schema: QuerySchema? = nil) throws(ParseError) {
        self.className = className
        if let w { try Self.refuseUnsupported(w, depth: 0) }
        if let schema { _ = try QueryCompiler(schema: schema).compile(Self.withoutNor(w)) }
        guard let w, !w.isNull else { root = .all([]); equalities = []; return }
        guard let o = w.objectValue else { throw ParseError(.invalidQuery, "where must be a JSON object") }
        var eq: [(String, String)] = []
        for e in o where !e.key.hasPrefix("$") {
            if let k = Self.indexKey(e.value) { eq.append((e.key, k)) }
        }
        equalities = eq
        root = try Self.compileObject(o, depth: 0)
    }

    /// Whether `object` satisfies the where.
    public func matches(_ object: JSONObject) -> Bool { root.eval(object) }

    /// The registry key for an equality value (strings, numbers, booleans, Pointers), or nil.
    public static func indexKey(_ v: JSONValue) -> String? {
        switch v {
        case .string(let s): return "s:" + s
        case .int(let i): return "n:" + String(Double(i))
        case .double(let d): return "n:" + String(d)
        case .bool(let b): return b ? "b:1" : "b:0"
        case .object(let o):
            if o["__type"]?.stringValue == "Pointer" || o["__type"]?.stringValue == "Object",
               let id = o["objectId"]?.stringValue { return "p:" + id }
            return nil
        default: return nil
        }
    }

    /// The registry key of an object's top-level field value, in `indexKey`'s vocabulary.
    public static func valueKey(_ v: JSONValue?) -> String? {
        guard let v else { return nil }
        if case .string(let s) = v { return "s:" + s }
        return indexKey(v)
    }

    // MARK: compilation

    static func refuseUnsupported(_ w: JSONValue, depth: Int) throws(ParseError) {
        guard depth < 32 else { throw ParseError(.invalidQuery, "query nested too deeply") }
        switch w {
        case .object(let o):
            for e in o {
                if refused.contains(e.key) {
                    throw ParseError(.invalidQuery, "\(e.key) cannot be evaluated on a single object: not supported in a live query")
                }
                if e.key == "__type" { continue }
                try refuseUnsupported(e.value, depth: depth + 1)
            }
        case .array(let a):
            for v in a { try refuseUnsupported(v, depth: depth + 1) }
        default: break
        }
    }

    /// The SQL compiler checks everything but `$nor` (rewritten as `$or` for the check only).
    static func withoutNor(_ w: JSONValue?) -> JSONValue? {
        guard let w else { return nil }
        switch w {
        case .object(var o):
            for i in o.entries.indices {
                if o.entries[i].key == "$nor" { o.entries[i].key = "$or" }
                o.entries[i].value = withoutNor(o.entries[i].value) ?? .null
            }
            return .object(o)
        case .array(let a): return .array(a.map { withoutNor($0) ?? .null })
        default: return w
        }
    }

    static func compileObject(_ o: JSONObject, depth: Int) throws(ParseError) -> Node {
        var parts: [Node] = []
        for e in o { parts.append(try compileEntry(e.key, e.value, depth: depth)) }
        return parts.count == 1 ? parts[0] : .all(parts)
    }

    static func compileEntry(_ key: String, _ value: JSONValue, depth: Int) throws(ParseError) -> Node {
        switch key {
        case "$or", "$and", "$nor":
            guard depth < QueryCompiler.maxDepth else { throw ParseError(.invalidQuery, "query nested deeper than \(QueryCompiler.maxDepth) levels") }
            guard let list = value.arrayValue, !list.isEmpty else { throw ParseError(.invalidQuery, "\(key) needs a non-empty array of queries") }
            var subs: [Node] = []
            for s in list {
                guard let o = s.objectValue else { throw ParseError(.invalidQuery, "\(key) needs an array of query objects") }
                subs.append(try compileObject(o, depth: depth + 1))
            }
            switch key {
            case "$or": return .any(subs)
            case "$and": return .all(subs)
            default: return .not(.any(subs))
            }
        default: break
        }
        if key.hasPrefix("$") { throw ParseError(.invalidQuery, "unknown operator \(key)") }
        guard key == "objectId" || key == "createdAt" || key == "updatedAt" || Naming.isValidFieldPath(key) else {
            throw ParseError(.invalidKeyName, "invalid field name: \(key)")
        }
        if key == "ACL" { throw ParseError(.invalidQuery, "cannot query on ACL") }
        let path = key.split(separator: ".").map(String.init)
        if let ops = value.objectValue, let first = ops.entries.first, first.key.hasPrefix("$") {
            var parts: [Node] = []
            for e in ops {
                parts.append(try compileOperator(path, e.key, e.value, ops: ops))
            }
            return parts.count == 1 ? parts[0] : .all(parts)
        }
        return .field(path, .equals(try Operand(value), whole: value))
    }

    static func compileOperator(_ path: [String], _ op: String, _ v: JSONValue, ops: JSONObject) throws(ParseError) -> Node {
        switch op {
        case "$eq": return .field(path, .equals(try Operand(v), whole: v))
        case "$ne": return .not(.field(path, .equals(try Operand(v), whole: v)))
        case "$lt", "$lte", "$gt", "$gte":
            let o = try Operand(v)
            switch o {
            case .number, .string, .date, .pointer: break
            default: throw ParseError(.invalidQuery, "\(op) needs a number, string or Date")
            }
            return .field(path, .compare(op, o))
        case "$in", "$nin", "$all":
            guard let list = v.arrayValue else { throw ParseError(.invalidQuery, "\(op) needs an array") }
            var operands: [(Operand, JSONValue)] = []
            for x in list { operands.append((try Operand(x), x)) }
            if op == "$all" { return .field(path, .all(operands)) }
            let n = Node.field(path, .inList(operands))
            return op == "$in" ? n : .not(n)
        case "$exists":
            guard let b = v.boolValue else { throw ParseError(.invalidQuery, "$exists needs true or false") }
            return .field(path, .exists(b))
        case "$regex":
            guard let p = v.stringValue else { throw ParseError(.invalidQuery, "$regex needs a string") }
            let icase = ops["$options"]?.stringValue?.contains("i") ?? false
            return .field(path, .regex(try Regex(QueryCompiler.translateQuotes(p), icase: icase)))
        case "$options":
            guard ops["$regex"] != nil else { throw ParseError(.invalidQuery, "$options needs $regex") }
            return .all([])
        case "$nearSphere":
            let c = try geoPoint(v)
            var radius = Double.infinity
            for (key, scale) in [("$maxDistance", 1.0), ("$maxDistanceInRadians", 1.0),
                                 ("$maxDistanceInMiles", 1 / EarthRadius.miles),
                                 ("$maxDistanceInKilometers", 1 / EarthRadius.kilometers)] {
                if let d = ops[key]?.doubleValue { radius = d * scale }
            }
            return .field(path, .near(c.0, c.1, radius))
        case "$maxDistance", "$maxDistanceInRadians", "$maxDistanceInMiles", "$maxDistanceInKilometers":
            guard ops["$nearSphere"] != nil else { throw ParseError(.invalidQuery, "\(op) needs $nearSphere") }
            return .all([])
        case "$within", "$geoWithin":
            guard let spec = v.objectValue, spec.count == 1, let shape = spec.entries.first else {
                throw ParseError(.invalidQuery, "\(op) needs exactly one of $box or $centerSphere")
            }
            if shape.key == "$box", let pts = shape.value.arrayValue, pts.count == 2 {
                let sw = try geoPoint(pts[0]), ne = try geoPoint(pts[1])
                return .field(path, .box(south: sw.0, west: sw.1, north: ne.0, east: ne.1))
            }
            if shape.key == "$centerSphere", op == "$geoWithin", let a = shape.value.arrayValue, a.count == 2,
               let r = a[1].doubleValue {
                if let pair = a[0].arrayValue, pair.count == 2, let x = pair[0].doubleValue, let y = pair[1].doubleValue {
                    return .field(path, .near(y, x, r))
                }
                let c = try geoPoint(a[0])
                return .field(path, .near(c.0, c.1, r))
            }
            throw ParseError(.invalidQuery, "unsupported \(op) shape \(shape.key): use $box or $centerSphere")
        default:
            throw ParseError(.invalidQuery, "unknown operator \(op)")
        }
    }

    static func geoPoint(_ v: JSONValue) throws(ParseError) -> (Double, Double) {
        guard v.parseType == "GeoPoint", let lat = v["latitude"]?.doubleValue, let lng = v["longitude"]?.doubleValue,
              lat >= -90, lat <= 90, lng >= -180, lng <= 180 else {
            throw ParseError(.invalidQuery, "expected a GeoPoint {\"__type\":\"GeoPoint\",\"latitude\":…,\"longitude\":…}")
        }
        return (lat, lng)
    }
}

// MARK: evaluation

/// A query value classified as the SQL compiler classifies it.
enum Operand: Sendable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case date(String)  // canonical ISO text
    case pointer(String)
    case geoPoint(Double, Double)
    case file(String)
    case json(JSONValue)

    init(_ v: JSONValue) throws(ParseError) {
        switch v {
        case .null: self = .null
        case .bool(let b): self = .bool(b)
        case .int(let i): self = .number(Double(i))
        case .double(let d): self = .number(d)
        case .string(let s): self = .string(s)
        case .array: self = .json(v)
        case .object(let o):
            guard let t = o["__type"] else { self = .json(v); return }
            switch t.stringValue {
            case "Date":
                guard let iso = o["iso"]?.stringValue, let ms = ISO8601.parse(iso) else {
                    throw ParseError(.incorrectType, "invalid Date: expected {\"__type\":\"Date\",\"iso\":…}")
                }
                self = .date(ISO8601.format(millis: ms))
            case "Pointer", "Object":
                guard o["className"]?.stringValue != nil, let id = o["objectId"]?.stringValue else {
                    throw ParseError(.incorrectType, "invalid Pointer: className and objectId are required")
                }
                self = .pointer(id)
            case "GeoPoint":
                let p = try LiveMatcher.geoPoint(v)
                self = .geoPoint(p.0, p.1)
            case "File":
                guard let n = o["name"]?.stringValue else { throw ParseError(.incorrectType, "invalid File: name is required") }
                self = .file(n)
            default:
                throw ParseError(.invalidQuery, "cannot query with a value of type \(t.stringValue ?? "?")")
            }
        }
    }
}

/// A SQL scalar as SQLite compares them: numbers sort before text.
enum Scalar: Comparable {
    case num(Double)
    case text(String)

    static func < (a: Scalar, b: Scalar) -> Bool {
        switch (a, b) {
        case (.num(let x), .num(let y)): return x < y
        case (.text(let x), .text(let y)): return Array(x.utf8).lexicographicallyPrecedes(Array(y.utf8))
        case (.num, .text): return true
        case (.text, .num): return false
        }
    }

    /// What `json_extract` yields for a stored value (nil = SQL NULL).
    init?(stored v: JSONValue?) {
        guard let v else { return nil }
        switch v {
        case .null: return nil
        case .bool(let b): self = .num(b ? 1 : 0)
        case .int(let i): self = .num(Double(i))
        case .double(let d): self = .num(d)
        case .string(let s): self = .text(s)
        case .array, .object: self = .text(JSON.encodeString(v))
        }
    }
}

/// A compiled regular expression (POSIX ERE, like the SQL `regexp` function).
final class Regex: @unchecked Sendable {
    // regexec on a compiled regex_t is safe from many threads (glibc keeps match state per call).
    private let re = UnsafeMutablePointer<regex_t>.allocate(capacity: 1)

    init(_ pattern: String, icase: Bool) throws(ParseError) {
        guard pattern.utf8.count <= QueryCompiler.maxRegexBytes else {
            re.deallocate()
            throw ParseError(.invalidQuery, "$regex pattern longer than \(QueryCompiler.maxRegexBytes) bytes")
        }
        var flags = REG_EXTENDED | REG_NOSUB
        if icase { flags |= REG_ICASE }
        if regcomp(re, pattern, Int32(flags)) != 0 {
            re.deallocate()
            throw ParseError(.invalidQuery, "invalid $regex")
        }
    }

    func matches(_ s: String) -> Bool { regexec(re, s, 0, nil, 0) == 0 }

    deinit {
        regfree(re)
        re.deallocate()
    }
}

/// One field test.
enum Test: Sendable {
    case equals(Operand, whole: JSONValue)
    case compare(String, Operand)
    case inList([(Operand, JSONValue)])
    case all([(Operand, JSONValue)])
    case exists(Bool)
    case regex(Regex)
    case near(Double, Double, Double)
    case box(south: Double, west: Double, north: Double, east: Double)
}

indirect enum Node: Sendable {
    case all([Node])
    case any([Node])
    case not(Node)
    case field([String], Test)

    func eval(_ o: JSONObject) -> Bool {
        switch self {
        case .all(let ns): return ns.allSatisfy { $0.eval(o) }
        case .any(let ns): return ns.contains { $0.eval(o) }
        case .not(let n): return !n.eval(o)
        case .field(let path, let t): return Node.test(t, path: path, o)
        }
    }

    static func lookup(_ path: [String], _ o: JSONObject) -> (value: JSONValue?, present: Bool) {
        var cur: JSONValue = .object(o)
        for p in path {
            guard let obj = cur.objectValue, let next = obj[p] else { return (nil, false) }
            cur = next
        }
        return (cur, true)
    }

    static func compare(_ a: Scalar?, _ op: String, _ b: Scalar) -> Bool {
        guard let a else { return false }
        switch op {
        case "$lt": return a < b
        case "$lte": return a <= b
        case "$gt": return a > b
        case "$gte": return a >= b
        default: return a == b
        }
    }

    static func millis(_ v: JSONValue?) -> Int64? {
        guard let s = v?.stringValue else { return nil }
        return ISO8601.parse(s)
    }

    static func test(_ t: Test, path: [String], _ o: JSONObject) -> Bool {
        let (value, present) = lookup(path, o)
        let top = path.count == 1 ? path[0] : ""
        if top == "objectId" || top == "createdAt" || top == "updatedAt" {
            return reservedTest(t, top, value)
        }
        if case .array(let elems) = value {
            return arrayTest(t, elems, whole: value!)
        }
        switch t {
        case .equals(let op, let whole): return equals(value, op, whole)
        case .compare(let cmp, let op):
            guard let b = scalar(op) else { return false }
            return compare(operandSide(value, op), cmp, b)
        case .inList(let list): return list.contains { equals(value, $0.0, $0.1) }
        case .all(let list): return !list.isEmpty && list.allSatisfy { equals(value, $0.0, $0.1) }
        case .exists(let want): return present == want
        case .regex(let re):
            guard case .string(let s)? = value else {
                if let v = value, !v.isNull, case .text(let s)? = Scalar(stored: v) { return re.matches(s) }
                if case .num? = Scalar(stored: value) { return false }
                return false
            }
            return re.matches(s)
        case .near(let lat, let lng, let r):
            guard let p = point(value) else { return false }
            return GeoMath.distanceRadians(lat1: p.0, lng1: p.1, lat2: lat, lng2: lng) <= r
        case .box(let s, let w, let n, let e):
            guard let p = point(value) else { return false }
            guard p.0 >= s, p.0 <= n else { return false }
            return w <= e ? (p.1 >= w && p.1 <= e) : (p.1 >= w || p.1 <= e)
        }
    }

    static func point(_ v: JSONValue?) -> (Double, Double)? {
        guard let lat = v?["latitude"]?.doubleValue, let lng = v?["longitude"]?.doubleValue else { return nil }
        return (lat, lng)
    }

    /// The stored side of a comparison with `op`: a Date compares its `iso`, a Pointer its
    /// `objectId`, a File its `name`; anything else the value itself.
    static func operandSide(_ v: JSONValue?, _ op: Operand) -> Scalar? {
        switch op {
        case .date: return Scalar(stored: v?["iso"])
        case .pointer: return Scalar(stored: v?["objectId"])
        case .file: return Scalar(stored: v?["name"])
        default: return Scalar(stored: v)
        }
    }

    static func scalar(_ op: Operand) -> Scalar? {
        switch op {
        case .null, .geoPoint: return nil
        case .bool(let b): return .num(b ? 1 : 0)
        case .number(let d): return .num(d)
        case .string(let s), .date(let s), .pointer(let s), .file(let s): return .text(s)
        case .json(let v): return .text(JSON.encodeString(v))
        }
    }

    static func equals(_ v: JSONValue?, _ op: Operand, _ whole: JSONValue) -> Bool {
        switch op {
        case .null: return v == nil || v!.isNull
        case .geoPoint(let lat, let lng):
            guard let p = point(v) else { return false }
            return p.0 == lat && p.1 == lng
        case .json(let j): return v == j
        default:
            guard let b = scalar(op) else { return false }
            return operandSide(v, op) == b
        }
    }

    /// An array field: scalar tests apply to its elements (any element satisfies).
    static func arrayTest(_ t: Test, _ elems: [JSONValue], whole: JSONValue) -> Bool {
        switch t {
        case .equals(let op, let w):
            if case .json = op, w.arrayValue != nil { return whole == w }
            return elems.contains { elementEquals($0, op) }
        case .compare(let cmp, let op):
            return elems.contains { elementCompare($0, cmp, op) }
        case .inList(let list):
            return list.contains { item in elems.contains { elementEquals($0, item.0) } }
        case .all(let list):
            return !list.isEmpty && list.allSatisfy { item in elems.contains { elementEquals($0, item.0) } }
        case .exists(let want): return want
        case .regex(let re):
            return elems.contains { if case .string(let s) = $0 { return re.matches(s) } else { return false } }
        case .near, .box: return false
        }
    }

    static func elementEquals(_ e: JSONValue, _ op: Operand) -> Bool { elementCompare(e, "=", op) }

    /// SQL's `elementCondition`: a typed comparison of one array element.
    static func elementCompare(_ e: JSONValue, _ cmp: String, _ op: Operand) -> Bool {
        switch op {
        case .pointer(let id): return compare(Scalar(stored: e["objectId"]), cmp, .text(id))
        case .date(let iso): return compare(Scalar(stored: e["iso"]), cmp, .text(iso))
        case .file(let n): return compare(Scalar(stored: e["name"]), cmp, .text(n))
        case .number(let d):
            switch e {
            case .int(let i): return compare(.num(Double(i)), cmp, .num(d))
            case .double(let x): return compare(.num(x), cmp, .num(d))
            default: return false
            }
        case .string(let s):
            guard case .string(let x) = e else { return false }
            return compare(.text(x), cmp, .text(s))
        case .bool(let b):
            guard case .bool(let x) = e else { return false }
            return x == b
        case .json(let j):
            guard e.objectValue != nil || e.arrayValue != nil else { return false }
            return cmp == "=" ? e == j : compare(Scalar(stored: e), cmp, .text(JSON.encodeString(j)))
        case .null: return e.isNull
        case .geoPoint(let lat, let lng):
            guard let p = point(e) else { return false }
            return p.0 == lat && p.1 == lng
        }
    }

    /// `objectId` compares as text; `createdAt`/`updatedAt` as milliseconds.
    static func reservedTest(_ t: Test, _ field: String, _ v: JSONValue?) -> Bool {
        func side(_ op: Operand) -> (Scalar?, Scalar?) {
            if field == "objectId" {
                let a = v?.stringValue.map { Scalar.text($0) }
                switch op {
                case .string(let s), .pointer(let s): return (a, .text(s))
                default: return (a, nil)
                }
            }
            let a = millis(v).map { Scalar.num(Double($0)) }
            switch op {
            case .date(let iso), .string(let iso): return (a, ISO8601.parse(iso).map { .num(Double($0)) })
            case .number(let d): return (a, .num(d))
            default: return (a, nil)
            }
        }
        switch t {
        case .equals(let op, _):
            if case .null = op { return false }
            let (a, b) = side(op)
            guard let b else { return false }
            return a == b
        case .compare(let cmp, let op):
            let (a, b) = side(op)
            guard let b else { return false }
            return compare(a, cmp, b)
        case .inList(let list):
            return list.contains { item in let (a, b) = side(item.0); return b != nil && a == b }
        case .all(let list):
            return !list.isEmpty && list.allSatisfy { item in let (a, b) = side(item.0); return b != nil && a == b }
        case .exists(let want): return want
        case .regex(let re): return field == "objectId" && (v?.stringValue.map(re.matches) ?? false)
        case .near, .box: return false
        }
    }
}
