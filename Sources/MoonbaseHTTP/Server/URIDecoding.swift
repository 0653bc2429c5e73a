/// Percent-decoding of the request target (RFC 3986 path, form-urlencoded query).
///
/// Strict: a `%` not followed by two hex digits, a decoded NUL, or bytes that are not UTF-8
/// are errors (the server answers 400), never guessed at.
public enum URIDecoding {
    /// Splits a raw request target ("/a%20b?x=1") into raw path and raw query.
    public static func split(_ target: String) -> (path: Substring, query: Substring) {
        if let q = target.utf8.firstIndex(of: UInt8(ascii: "?")) {
            let after = target.utf8.index(after: q)
            return (target[..<q], target[after...])
        }
        return (target[...], "")
    }

    /// Decodes a path: `%XX` escapes only (`+` stays a plus). nil if malformed.
    public static func decodePath<S: StringProtocol>(_ raw: S) -> String? {
        decode(raw, plusIsSpace: false)
    }

    /// Decodes one query component (`+` is a space). nil if malformed.
    public static func decodeQueryComponent<S: StringProtocol>(_ raw: S) -> String? {
        decode(raw, plusIsSpace: true)
    }

    /// Parses `a=1&b=x+y&c` into decoded pairs (`c` → ("c", "")); empty pieces are skipped.
    /// nil if any component is malformed.
    ///
    /// Works on one contiguous copy of the bytes with integer offsets: every REST query (W3's
    /// `where=…&order=…&limit=…`) comes through here, and the generic `Substring.UTF8View`
    /// version (split into slices, index arithmetic per byte) cost about 47k instructions per
    /// request, more than compiling the query.
    public static func parseQuery<S: StringProtocol>(_ raw: S) -> [(String, String)]? {
        if raw.isEmpty { return [] }
        var text = String(raw)
        return text.withUTF8 { (b) -> [(String, String)]? in
            var out: [(String, String)] = []
            var start = 0
            let n = b.count
            while start < n {
                var end = start
                var eq = -1
                while end < n && b[end] != UInt8(ascii: "&") {
                    if eq < 0 && b[end] == UInt8(ascii: "=") { eq = end }
                    end += 1
                }
                if end > start {
                    if eq >= 0 {
                        guard let name = decode(b, start, eq, plusIsSpace: true),
                              let value = decode(b, eq + 1, end, plusIsSpace: true) else { return nil }
                        out.append((name, value))
                    } else {
                        guard let name = decode(b, start, end, plusIsSpace: true) else { return nil }
                        out.append((name, ""))
                    }
                }
                start = end + 1
            }
            return out
        }
    }

    /// Works on one contiguous copy (`String(raw)`: a `memcpy`); a component with nothing to
    /// decode is that copy. Copying the `UTF8View` into an array went byte by byte, and the fast
    /// path then built a second string: ~2,000 instructions for `/parse/functions/hello`.
    static func decode<S: StringProtocol>(_ raw: S, plusIsSpace: Bool) -> String? {
        var text = String(raw)
        let plain = text.withUTF8 { !needsDecoding($0, 0, $0.count, plusIsSpace: plusIsSpace) }
        return plain ? text : text.withUTF8 { unescape($0, 0, $0.count, plusIsSpace: plusIsSpace) }
    }

    /// Whether `b[from..<to]` has an escape, a `+` taken as a space, a NUL or a byte that is
    /// not ASCII (checked as UTF-8 by `decode`).
    static func needsDecoding(_ b: UnsafeBufferPointer<UInt8>, _ from: Int, _ to: Int, plusIsSpace: Bool) -> Bool {
        for k in from..<to {
            let c = b[k]
            if c == UInt8(ascii: "%") || (plusIsSpace && c == UInt8(ascii: "+")) || c == 0 || c >= 0x80 { return true }
        }
        return false
    }

    /// Decodes `b[from..<to]`: `%XX` escapes, `+` as a space when asked; nil when malformed
    /// (a bad escape, a NUL, bytes that are not UTF-8).
    static func decode(_ b: UnsafeBufferPointer<UInt8>, _ from: Int, _ to: Int, plusIsSpace: Bool) -> String? {
        // Fast path: nothing to decode.
        if !needsDecoding(b, from, to, plusIsSpace: plusIsSpace) {
            return String(decoding: UnsafeBufferPointer(rebasing: b[from..<to]), as: UTF8.self)
        }
        return unescape(b, from, to, plusIsSpace: plusIsSpace)
    }

    /// The slow path of `decode`, for a component that `needsDecoding`.
    static func unescape(_ b: UnsafeBufferPointer<UInt8>, _ from: Int, _ to: Int, plusIsSpace: Bool) -> String? {
        var malformed = false
        let out = [UInt8](unsafeUninitializedCapacity: to - from) { buf, count in
            var i = from, k = 0
            while i < to {
                let c = b[i]
                if c == UInt8(ascii: "%") {
                    guard i + 2 < to, let hi = hexValue(b[i + 1]), let lo = hexValue(b[i + 2]), hi | lo != 0 else {
                        malformed = true
                        break
                    }
                    buf[k] = hi << 4 | lo
                    i += 3
                } else {
                    if c == 0 { malformed = true; break }
                    buf[k] = plusIsSpace && c == UInt8(ascii: "+") ? UInt8(ascii: " ") : c
                    i += 1
                }
                k += 1
            }
            count = k
        }
        if malformed { return nil }
        return String(validating: out, as: UTF8.self)
    }

    @inline(__always)
    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
