import MoonbaseCore

/// Appends compact JSON to a byte buffer. Also used to splice raw, already-valid JSON
/// (stored documents) into responses without re-parsing them.
public struct JSONWriter {
    public var bytes: [UInt8]

    public init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    public mutating func raw(_ b: [UInt8]) { bytes.append(contentsOf: b) }
    public mutating func raw(_ b: UnsafeBufferPointer<UInt8>) { bytes.append(contentsOf: b) }
    public mutating func raw(_ s: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }
    public mutating func byte(_ c: UInt8) { bytes.append(c) }

    public mutating func write(_ v: JSONValue) {
        switch v {
        case .null: raw("null")
        case .bool(let b): if b { raw("true") } else { raw("false") }
        case .int(let i): int(i)
        case .double(let d): double(d)
        case .string(let s): string(s)
        case .array(let a):
            byte(UInt8(ascii: "["))
            var first = true
            for x in a {
                if !first { byte(UInt8(ascii: ",")) }
                first = false
                write(x)
            }
            byte(UInt8(ascii: "]"))
        case .object(let o):
            byte(UInt8(ascii: "{"))
            var first = true
            for e in o.entries {
                if !first { byte(UInt8(ascii: ",")) }
                first = false
                string(e.key)
                byte(UInt8(ascii: ":"))
                write(e.value)
            }
            byte(UInt8(ascii: "}"))
        }
    }

    public mutating func int(_ v: Int64) {
        if v == 0 { byte(48); return }
        var x = v.magnitude
        var tmp: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                  UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var n = 0
        withUnsafeMutableBytes(of: &tmp) { p in
            while x > 0 { p[19 - n] = UInt8(48 + x % 10); x /= 10; n += 1 }
            if v < 0 { bytes.append(45) }
            bytes.append(contentsOf: p[(20 - n)...])
        }
    }

    /// Doubles use Swift's shortest round-trip formatting; integral values print as integers
    /// when they fit exactly; non-finite values (never produced by our parser) print as null.
    public mutating func double(_ d: Double) {
        guard d.isFinite else { raw("null"); return }
        if d == d.rounded(), abs(d) < 1e15 {
            int(Int64(d))
            return
        }
        var s = d.description
        s.withUTF8 { bytes.append(contentsOf: $0) }
    }

    public mutating func string(_ s: String) {
        var s = s
        s.withUTF8 { string(utf8: $0) }
    }

    public mutating func string(utf8 buf: UnsafeBufferPointer<UInt8>) {
        byte(UInt8(ascii: "\""))
        var runStart = 0
        let hex: StaticString = "0123456789abcdef"
        for k in 0..<buf.count {
            let c = buf[k]
            if c >= 0x20 && c != 0x22 && c != 0x5C { continue }
            if k > runStart { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buf[runStart..<k])) }
            runStart = k + 1
            switch c {
            case 0x22: raw("\\\"")
            case 0x5C: raw("\\\\")
            case 0x0A: raw("\\n")
            case 0x0D: raw("\\r")
            case 0x09: raw("\\t")
            case 0x08: raw("\\b")
            case 0x0C: raw("\\f")
            default:
                raw("\\u00")
                byte(hex.utf8Start[Int(c >> 4)])
                byte(hex.utf8Start[Int(c & 15)])
            }
        }
        if buf.count > runStart { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buf[runStart..<buf.count])) }
        byte(UInt8(ascii: "\""))
    }
}
