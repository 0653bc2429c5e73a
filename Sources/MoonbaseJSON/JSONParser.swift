import MoonbaseCore

struct JSONSyntaxError: Error {
    let message: String
    let offset: Int
}

/// A recursive-descent parser over UTF-8 bytes, building `JSONValue`s.
struct JSONParser {
    let buf: UnsafeBufferPointer<UInt8>
    var i = 0
    var depth = 0
    static let maxDepth = 512

    init(_ buf: UnsafeBufferPointer<UInt8>) { self.buf = buf }

    mutating func parseDocument() throws(JSONSyntaxError) -> JSONValue {
        skipWS()
        let v = try parseValue()
        skipWS()
        if i != buf.count { throw JSONSyntaxError(message: "unexpected trailing data", offset: i) }
        return v
    }

    @inline(__always) mutating func skipWS() {
        while i < buf.count {
            let c = buf[i]
            if c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 { i += 1 } else { break }
        }
    }

    mutating func parseValue() throws(JSONSyntaxError) -> JSONValue {
        guard i < buf.count else { throw JSONSyntaxError(message: "unexpected end of input", offset: i) }
        switch buf[i] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw JSONSyntaxError(message: "unexpected character", offset: i)
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONSyntaxError) {
        let n = word.utf8CodeUnitCount
        guard i + n <= buf.count else { throw JSONSyntaxError(message: "bad literal", offset: i) }
        let p = word.utf8Start
        for k in 0..<n where buf[i + k] != p[k] { throw JSONSyntaxError(message: "bad literal", offset: i) }
        i += n
    }

    mutating func parseObject() throws(JSONSyntaxError) -> JSONValue {
        depth += 1
        if depth > Self.maxDepth { throw JSONSyntaxError(message: "nesting too deep", offset: i) }
        defer { depth -= 1 }
        i += 1
        var entries: [JSONObject.Entry] = []
        skipWS()
        if i < buf.count && buf[i] == UInt8(ascii: "}") { i += 1; return .object(JSONObject(entries)) }
        while true {
            skipWS()
            guard i < buf.count, buf[i] == UInt8(ascii: "\"") else {
                throw JSONSyntaxError(message: "expected a string key", offset: i)
            }
            let key = try parseString()
            skipWS()
            guard i < buf.count, buf[i] == UInt8(ascii: ":") else { throw JSONSyntaxError(message: "expected ':'", offset: i) }
            i += 1
            skipWS()
            let v = try parseValue()
            entries.append(JSONObject.Entry(key, v))
            skipWS()
            guard i < buf.count else { throw JSONSyntaxError(message: "unexpected end of input", offset: i) }
            if buf[i] == UInt8(ascii: ",") { i += 1; continue }
            if buf[i] == UInt8(ascii: "}") { i += 1; break }
            throw JSONSyntaxError(message: "expected ',' or '}'", offset: i)
        }
        return .object(JSONObject(entries))
    }

    mutating func parseArray() throws(JSONSyntaxError) -> JSONValue {
        depth += 1
        if depth > Self.maxDepth { throw JSONSyntaxError(message: "nesting too deep", offset: i) }
        defer { depth -= 1 }
        i += 1
        var items: [JSONValue] = []
        skipWS()
        if i < buf.count && buf[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
        while true {
            skipWS()
            items.append(try parseValue())
            skipWS()
            guard i < buf.count else { throw JSONSyntaxError(message: "unexpected end of input", offset: i) }
            if buf[i] == UInt8(ascii: ",") { i += 1; continue }
            if buf[i] == UInt8(ascii: "]") { i += 1; break }
            throw JSONSyntaxError(message: "expected ',' or ']'", offset: i)
        }
        return .array(items)
    }

    mutating func parseString() throws(JSONSyntaxError) -> String {
        i += 1  // opening quote
        let start = i
        // Fast path: no escapes.
        while i < buf.count {
            let c = buf[i]
            if c == UInt8(ascii: "\"") {
                let s = UnsafeBufferPointer(rebasing: buf[start..<i])
                i += 1
                guard let str = String(validating: s, as: UTF8.self) else {
                    throw JSONSyntaxError(message: "invalid UTF-8 in string", offset: start)
                }
                return str
            }
            if c == UInt8(ascii: "\\") { break }
            if c < 0x20 { throw JSONSyntaxError(message: "control character in string", offset: i) }
            i += 1
        }
        var out = [UInt8](UnsafeBufferPointer(rebasing: buf[start..<i]))
        while i < buf.count {
            let c = buf[i]
            if c == UInt8(ascii: "\"") {
                i += 1
                guard let str = String(validating: out, as: UTF8.self) else {
                    throw JSONSyntaxError(message: "invalid UTF-8 in string", offset: start)
                }
                return str
            }
            if c < 0x20 { throw JSONSyntaxError(message: "control character in string", offset: i) }
            if c != UInt8(ascii: "\\") { out.append(c); i += 1; continue }
            i += 1
            guard i < buf.count else { break }
            let e = buf[i]
            i += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var cp = try hex4()
                if cp >= 0xD800 && cp < 0xDC00 {
                    guard i + 1 < buf.count, buf[i] == UInt8(ascii: "\\"), buf[i + 1] == UInt8(ascii: "u") else {
                        throw JSONSyntaxError(message: "unpaired surrogate", offset: i)
                    }
                    i += 2
                    let lo = try hex4()
                    guard lo >= 0xDC00 && lo < 0xE000 else { throw JSONSyntaxError(message: "unpaired surrogate", offset: i) }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                } else if cp >= 0xDC00 && cp < 0xE000 {
                    throw JSONSyntaxError(message: "unpaired surrogate", offset: i)
                }
                appendUTF8(&out, cp)
            default:
                throw JSONSyntaxError(message: "bad escape", offset: i - 1)
            }
        }
        throw JSONSyntaxError(message: "unterminated string", offset: start - 1)
    }

    mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
        guard i + 4 <= buf.count else { throw JSONSyntaxError(message: "bad \\u escape", offset: i) }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = buf[i]
            var d: UInt32
            switch c {
            case 48...57: d = UInt32(c - 48)
            case 65...70: d = UInt32(c - 55)
            case 97...102: d = UInt32(c - 87)
            default: throw JSONSyntaxError(message: "bad \\u escape", offset: i)
            }
            v = v << 4 | d
            i += 1
        }
        return v
    }

    func appendUTF8(_ out: inout [UInt8], _ cp: UInt32) {
        if cp < 0x80 {
            out.append(UInt8(cp))
        } else if cp < 0x800 {
            out.append(UInt8(0xC0 | (cp >> 6))); out.append(UInt8(0x80 | (cp & 0x3F)))
        } else if cp < 0x10000 {
            out.append(UInt8(0xE0 | (cp >> 12))); out.append(UInt8(0x80 | ((cp >> 6) & 0x3F)))
            out.append(UInt8(0x80 | (cp & 0x3F)))
        } else {
            out.append(UInt8(0xF0 | (cp >> 18))); out.append(UInt8(0x80 | ((cp >> 12) & 0x3F)))
            out.append(UInt8(0x80 | ((cp >> 6) & 0x3F))); out.append(UInt8(0x80 | (cp & 0x3F)))
        }
    }

    mutating func parseNumber() throws(JSONSyntaxError) -> JSONValue {
        let start = i
        var negative = false
        if buf[i] == UInt8(ascii: "-") { negative = true; i += 1 }
        guard i < buf.count, buf[i] >= 48 && buf[i] <= 57 else { throw JSONSyntaxError(message: "bad number", offset: start) }
        if buf[i] == 48 {
            i += 1
            if i < buf.count, buf[i] >= 48 && buf[i] <= 57 { throw JSONSyntaxError(message: "bad number (leading zero)", offset: start) }
        } else {
            while i < buf.count, buf[i] >= 48 && buf[i] <= 57 { i += 1 }
        }
        var isInt = true
        if i < buf.count, buf[i] == UInt8(ascii: ".") {
            isInt = false
            i += 1
            guard i < buf.count, buf[i] >= 48 && buf[i] <= 57 else { throw JSONSyntaxError(message: "bad number", offset: start) }
            while i < buf.count, buf[i] >= 48 && buf[i] <= 57 { i += 1 }
        }
        if i < buf.count, buf[i] == UInt8(ascii: "e") || buf[i] == UInt8(ascii: "E") {
            isInt = false
            i += 1
            if i < buf.count, buf[i] == UInt8(ascii: "+") || buf[i] == UInt8(ascii: "-") { i += 1 }
            guard i < buf.count, buf[i] >= 48 && buf[i] <= 57 else { throw JSONSyntaxError(message: "bad number", offset: start) }
            while i < buf.count, buf[i] >= 48 && buf[i] <= 57 { i += 1 }
        }
        if isInt && i - start <= 18 {
            var v: Int64 = 0
            var k = negative ? start + 1 : start
            while k < i { v = v * 10 + Int64(buf[k] - 48); k += 1 }
            return .int(negative ? -v : v)
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: buf[start..<i]), as: UTF8.self)
        if isInt, let v = Int64(text) { return .int(v) }
        guard let d = Double(text), d.isFinite else { throw JSONSyntaxError(message: "number out of range", offset: start) }
        return .double(d)
    }
}
