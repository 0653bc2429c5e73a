import MoonbaseCore

/// A JSON value: the vocabulary every module shares for documents that must be inspected.
///
/// Numbers keep Parse's distinction between integers and doubles: a literal without a fraction
/// or exponent that fits in 64 bits is `.int`. Objects keep their key order (responses read
/// naturally and tests compare byte-for-byte).
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)
}

/// An ordered JSON object. Lookups are linear: documents have few keys, and a linear scan over
/// a contiguous array beats hashing at that size.
public struct JSONObject: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
    public struct Entry: Sendable, Hashable {
        public var key: String
        public var value: JSONValue
        public init(_ key: String, _ value: JSONValue) { self.key = key; self.value = value }
    }

    public var entries: [Entry]

    public init() { entries = [] }
    public init(_ entries: [Entry]) { self.entries = entries }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        entries = elements.map { Entry($0.0, $0.1) }
    }

    public var count: Int { entries.count }
    public var isEmpty: Bool { entries.isEmpty }
    public var keys: [String] { entries.map(\.key) }

    public func index(of key: String) -> Int? { entries.firstIndex { $0.key == key } }

    /// Reading returns the value; assigning `nil` removes the key; assigning a value replaces it
    /// in place or appends it.
    public subscript(key: String) -> JSONValue? {
        get {
            for e in entries where e.key == key { return e.value }
            return nil
        }
        set {
            if let i = index(of: key) {
                if let newValue { entries[i].value = newValue } else { entries.remove(at: i) }
            } else if let newValue {
                entries.append(Entry(key, newValue))
            }
        }
    }

    @discardableResult
    public mutating func removeValue(forKey key: String) -> JSONValue? {
        guard let i = index(of: key) else { return nil }
        return entries.remove(at: i).value
    }

    public func makeIterator() -> IndexingIterator<[Entry]> { entries.makeIterator() }

    /// Equality ignores key order (JSON objects are unordered).
    public static func == (a: JSONObject, b: JSONObject) -> Bool {
        guard a.entries.count == b.entries.count else { return false }
        for e in a.entries where b[e.key] != e.value { return false }
        return true
    }

    public func hash(into h: inout Hasher) {
        h.combine(entries.count)
        for key in entries.map(\.key).sorted() { h.combine(key); h.combine(self[key]) }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral v: String) { self = .string(v) }
    public init(integerLiteral v: Int64) { self = .int(v) }
    public init(floatLiteral v: Double) { self = .double(v) }
    public init(booleanLiteral v: Bool) { self = .bool(v) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(JSONObject(elements.map { JSONObject.Entry($0.0, $0.1) }))
    }
    public init(nilLiteral: ()) { self = .null }
}

extension JSONValue {
    public var isNull: Bool { if case .null = self { return true } else { return false } }
    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    public var objectValue: JSONObject? { if case .object(let o) = self { return o } else { return nil } }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a } else { return nil } }
    /// An integer, also from a double with no fractional part.
    public var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d.rounded() == d && abs(d) < 9.0e18: return Int64(d)
        default: return nil
        }
    }
    /// A number as a double (ints convert).
    public var doubleValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }
    public var isNumber: Bool {
        switch self {
        case .int, .double: return true
        default: return false
        }
    }

    /// Member of an object, or nil.
    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    /// Parse's `__type` of a typed value (`Date`, `GeoPoint`, `Pointer`, `File`, `Object`, …).
    public var parseType: String? { self["__type"]?.stringValue }
}
