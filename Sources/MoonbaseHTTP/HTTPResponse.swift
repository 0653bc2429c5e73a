import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What a handler answers: a status, headers and either a byte body or a file.
///
/// The server adds `X-Request-Id`, and `Content-Type: application/json; charset=utf-8` when the
/// handler set no `Content-Type` (every Moonbase answer is JSON unless it says otherwise).
/// For `HEAD` requests libmicrohttpd sends the headers (with the body's `Content-Length`) only.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// When set, the response streams this file instead of `body`.
    public var file: HTTPFileBody?
    /// When set, the body is produced incrementally by this stream instead of `body`.
    public var stream: HTTPStreamBody?

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = [], file: HTTPFileBody? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.file = file
    }

    /// The JSON content type every JSON helper sets.
    public static let jsonContentType = "application/json; charset=utf-8"

    /// A JSON answer: `bytes` must already be encoded JSON.
    public static func json(_ status: Int, _ bytes: [UInt8], headers: [(String, String)] = []) -> HTTPResponse {
        var h: [(String, String)] = [("Content-Type", jsonContentType)]
        h.append(contentsOf: headers)
        return HTTPResponse(status: status, headers: h, body: bytes)
    }

    /// A Parse error answer with body `{"code":N,"error":"msg"}`.
    public static func parseError(status: Int, code: ParseErrorCode, message: String,
                                  headers: [(String, String)] = []) -> HTTPResponse {
        json(status, Array("{\"code\":\(code.rawValue),\"error\":\(Log.jsonQuote(message))}".utf8), headers: headers)
    }

    /// The answer for a `ParseError`: its HTTP status (the code's status, or an override) and headers.
    public static func error(_ e: ParseError) -> HTTPResponse {
        parseError(status: e.httpStatus, code: e.code, message: e.message, headers: e.headers)
    }

    /// A plain-text answer (`/metrics`, diagnostics).
    public static func text(_ status: Int, _ text: String, contentType: String = "text/plain; charset=utf-8",
                            headers: [(String, String)] = []) -> HTTPResponse {
        var h: [(String, String)] = [("Content-Type", contentType)]
        h.append(contentsOf: headers)
        return HTTPResponse(status: status, headers: h, body: Array(text.utf8))
    }

    /// Streams `file` (sendfile under the hood) with the given content type.
    public static func file(_ status: Int = 200, _ file: HTTPFileBody, contentType: String,
                            headers: [(String, String)] = []) -> HTTPResponse {
        var h: [(String, String)] = [("Content-Type", contentType)]
        h.append(contentsOf: headers)
        return HTTPResponse(status: status, headers: h, file: file)
    }

    /// The first header with this name (case-insensitive).
    public func header(_ name: String) -> String? {
        for (k, v) in headers where asciiCaseEqual(k, name) { return v }
        return nil
    }
}

/// An open file to send as a response body: `size` bytes of `fd` from `offset`.
///
/// The object owns the descriptor: the server hands it to libmicrohttpd (which closes it after
/// sending); a body never sent closes it in `deinit`. Thread-safety: `fd`, `offset`, `size` are
/// immutable; ownership moves exactly once through an atomic exchange.
public final class HTTPFileBody: Sendable {
    public let fd: Int32
    public let offset: UInt64
    public let size: UInt64
    private let owned = Atomic<Bool>(true)

    /// Takes ownership of an open descriptor.
    public init(fd: Int32, offset: UInt64 = 0, size: UInt64) {
        self.fd = fd
        self.offset = offset
        self.size = size
    }

    /// Opens a regular file for reading. Missing → 101 (404); not a regular file → 101.
    public static func open(path: String) throws(ParseError) -> HTTPFileBody {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { throw ParseError(.objectNotFound, "file not found") }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            throw ParseError(.objectNotFound, "file not found")
        }
        return HTTPFileBody(fd: fd, size: UInt64(st.st_size))
    }

    /// Gives up ownership (to libmicrohttpd); nil if it was already taken.
    func take() -> Int32? {
        owned.exchange(false, ordering: .acquiringAndReleasing) ? fd : nil
    }

    deinit {
        if owned.load(ordering: .acquiring) { close(fd) }
    }
}

/// Header names compared ASCII-case-insensitively, over the strings' contiguous UTF-8 where they
/// have it (every native string): zipping two `UTF8View`s cost about 20 instructions a byte.
@inline(__always)
func asciiCaseEqual(_ a: String, _ b: String) -> Bool {
    guard a.utf8.count == b.utf8.count else { return false }
    @inline(__always) func same<X: Sequence, Y: Sequence>(_ x: X, _ y: Y) -> Bool where X.Element == UInt8, Y.Element == UInt8 {
        for (p, q) in zip(x, y) where p != q {
            let lp = (p >= 65 && p <= 90) ? p + 32 : p
            let lq = (q >= 65 && q <= 90) ? q + 32 : q
            if lp != lq { return false }
        }
        return true
    }
    return a.utf8.withContiguousStorageIfAvailable { x in
        b.utf8.withContiguousStorageIfAvailable { y in same(x, y) }
    }.flatMap { $0 } ?? same(a.utf8, b.utf8)
}
