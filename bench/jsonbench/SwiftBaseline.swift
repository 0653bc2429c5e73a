// The pure-Swift string escaper and double formatter MoonbaseJSON used before the C codec
// (commit 7233f1f), kept here so jsonbench can show, per direction, that the CJSON path is the
// faster one (the brief: use the C core where it measures faster).
import CJSON

/// Appends `buf` as a JSON string, escaping byte by byte in Swift.
func swiftEscape(_ out: inout [UInt8], _ buf: UnsafeBufferPointer<UInt8>) {
    out.append(UInt8(ascii: "\""))
    var runStart = 0
    let hex: StaticString = "0123456789abcdef"
    for k in 0..<buf.count {
        let c = buf[k]
        if c >= 0x20 && c != 0x22 && c != 0x5C { continue }
        if k > runStart { out.append(contentsOf: UnsafeBufferPointer(rebasing: buf[runStart..<k])) }
        runStart = k + 1
        out.append(0x5C)
        switch c {
        case 0x22: out.append(0x22)
        case 0x5C: out.append(0x5C)
        case 0x0A: out.append(UInt8(ascii: "n"))
        case 0x0D: out.append(UInt8(ascii: "r"))
        case 0x09: out.append(UInt8(ascii: "t"))
        case 0x08: out.append(UInt8(ascii: "b"))
        case 0x0C: out.append(UInt8(ascii: "f"))
        default:
            out.append(contentsOf: [UInt8(ascii: "u"), 48, 48])
            out.append(hex.utf8Start[Int(c >> 4)])
            out.append(hex.utf8Start[Int(c & 15)])
        }
    }
    if buf.count > runStart { out.append(contentsOf: UnsafeBufferPointer(rebasing: buf[runStart..<buf.count])) }
    out.append(UInt8(ascii: "\""))
}

/// Appends a non-integral finite double with Swift's shortest round-trip `description`.
func swiftDouble(_ out: inout [UInt8], _ d: Double) {
    var s = d.description
    s.withUTF8 { out.append(contentsOf: $0) }
}

/// Appends a double with CJSON's formatter, as MoonbaseJSON does in its fixed-notation range.
func cDouble(_ out: inout [UInt8], _ d: Double) {
    withUnsafeTemporaryAllocation(of: CChar.self, capacity: Int(CJ_DOUBLE_MAX)) { tmp in
        let n = cj_format_double(d, tmp.baseAddress!)
        tmp.baseAddress!.withMemoryRebound(to: UInt8.self, capacity: n) {
            out.append(contentsOf: UnsafeBufferPointer(start: $0, count: n))
        }
    }
}
