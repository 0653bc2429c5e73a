import Synchronization

/// One HTTP request as the handler sees it: fully read (body included), decoded once.
///
/// Built on the I/O thread; handed to a worker unchanged (a value type, `Sendable`).
public struct HTTPRequest: Sendable {
    /// The request method as sent ("GET", "POST", ...).
    public var method: String
    /// The percent-decoded path, without the query string.
    public var path: String
    /// The text after `?`, not decoded ("" if none).
    public var rawQuery: String
    /// Decoded query pairs in order (form-urlencoded rules: `+` is a space).
    public var query: [(String, String)]
    /// Request headers in arrival order, names lower-cased.
    public var headers: [(String, String)]
    /// The whole request body (chunked bodies are already de-chunked).
    public var body: [UInt8]
    /// The client's numeric address ("127.0.0.1", "::1").
    public var remoteAddress: String
    /// The client's `X-Request-Id` when sane (1–64 of `[A-Za-z0-9_-]`), else a generated one.
    /// Echoed in the response header `X-Request-Id`.
    public var requestId: String
    /// The handler's note from `HTTPHandler.dispatch` (nil until then), read back by `handle`.
    public var note: (any AnyObject & Sendable)?

    public init(method: String, path: String, rawQuery: String = "", query: [(String, String)] = [],
                headers: [(String, String)] = [], body: [UInt8] = [], remoteAddress: String = "",
                requestId: String = "") {
        self.method = method
        self.path = path
        self.rawQuery = rawQuery
        self.query = query
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
        self.requestId = requestId
    }

    /// The first header with this (lower-case) name.
    public func header(_ lowercasedName: String) -> String? {
        for (k, v) in headers where k == lowercasedName { return v }
        return nil
    }

    /// The first query value with this name (decoded).
    public func queryValue(_ name: String) -> String? {
        for (k, v) in query where k == name { return v }
        return nil
    }

    /// All query values with this name, in order (`?a=1&a=2`).
    public func queryValues(_ name: String) -> [String] {
        query.compactMap { $0.0 == name ? $0.1 : nil }
    }
}

/// Request-id helpers: accept a sane client id, otherwise mint a cheap unique one.
public enum RequestID {
    /// True when `id` is 1–64 characters of `[A-Za-z0-9_-]`.
    public static func isSane(_ id: String) -> Bool {
        let u = id.utf8
        guard !u.isEmpty, u.count <= 64 else { return false }
        for c in u {
            switch c {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                continue
            default:
                return false
            }
        }
        return true
    }

    /// A process-unique id: a random per-process prefix plus a counter ("3f9a0c1e-1b").
    /// No syscall and no lock on the hot path (one relaxed atomic increment).
    public static func generate() -> String {
        let n = counter.add(1, ordering: .relaxed).oldValue
        return prefix + "-" + String(n, radix: 16)
    }

    private static let prefix: String = {
        var g = SystemRandomNumberGenerator()
        let v = g.next() as UInt64
        let s = String(v & 0xFFFF_FFFF_FFFF, radix: 16)
        return String(repeating: "0", count: max(0, 12 - s.count)) + s
    }()

    private static let counter = Atomic<UInt64>(1)
}
