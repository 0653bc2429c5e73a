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
        decode(raw.utf8, plusIsSpace: false)
    }

    /// Decodes one query component (`+` is a space). nil if malformed.
    public static func decodeQueryComponent<S: StringProtocol>(_ raw: S) -> String? {
        decode(raw.utf8, plusIsSpace: true)
    }

    /// Parses `a=1&b=x+y&c` into decoded pairs (`c` → ("c", "")); empty pieces are skipped.
    /// nil if any component is malformed.
    public static func parseQuery<S: StringProtocol>(_ raw: S) -> [(String, String)]? {
        var out: [(String, String)] = []
        if raw.isEmpty { return out }
        for piece in raw.utf8.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let name: String, value: String
            if let eq = piece.firstIndex(of: UInt8(ascii: "=")) {
                guard let n = decode(piece[piece.startIndex..<eq], plusIsSpace: true),
                      let v = decode(piece[piece.index(after: eq)...], plusIsSpace: true) else { return nil }
                name = n
                value = v
            } else {
                guard let n = decode(piece, plusIsSpace: true) else { return nil }
                name = n
                value = ""
            }
            out.append((name, value))
        }
        return out
    }

    static func decode<C: Collection>(_ bytes: C, plusIsSpace: Bool) -> String? where C.Element == UInt8 {
        // Fast path: nothing to decode.
        var needs = false
        for b in bytes where b == UInt8(ascii: "%") || (plusIsSpace && b == UInt8(ascii: "+")) || b == 0 || b >= 0x80 {
            needs = true
            break
        }
        if !needs { return String(decoding: bytes, as: UTF8.self) }

        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = bytes.startIndex
        while i != bytes.endIndex {
            let b = bytes[i]
            if b == UInt8(ascii: "%") {
                let h1 = bytes.index(after: i)
                guard h1 != bytes.endIndex else { return nil }
                let h2 = bytes.index(after: h1)
                guard h2 != bytes.endIndex, let hi = hexValue(bytes[h1]), let lo = hexValue(bytes[h2]) else { return nil }
                let v = hi << 4 | lo
                if v == 0 { return nil }
                out.append(v)
                i = bytes.index(after: h2)
                continue
            }
            if b == 0 { return nil }
            out.append(plusIsSpace && b == UInt8(ascii: "+") ? UInt8(ascii: " ") : b)
            i = bytes.index(after: i)
        }
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
