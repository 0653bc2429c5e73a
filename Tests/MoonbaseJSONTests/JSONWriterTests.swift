import Testing
import MoonbaseCore
@testable import MoonbaseJSON

/// The writer: CJSON's escaper for strings, its shortest formatter for doubles.
@Suite struct JSONWriterTests {
    @Test func escapesEveryControlByteAndNothingElse() throws {
        var scalars = String.UnicodeScalarView()
        for c in 0..<0x80 { scalars.append(Unicode.Scalar(UInt8(c))) }
        let all = String(scalars)
        let text = JSON.encodeString(.string(all))
        var expected = "\""
        for c in 0..<0x20 {
            switch c {
            case 0x08: expected += "\\b"
            case 0x09: expected += "\\t"
            case 0x0A: expected += "\\n"
            case 0x0C: expected += "\\f"
            case 0x0D: expected += "\\r"
            default:
                let hex = String(c, radix: 16)
                expected += "\\u00" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        for c in 0x20..<0x80 {
            if c == 0x22 { expected += "\\\"" } else if c == 0x5C { expected += "\\\\" } else {
                expected.unicodeScalars.append(Unicode.Scalar(UInt8(c)))
            }
        }
        expected += "\""
        #expect(text == expected)
        #expect(try JSON.parse(text) == .string(all))
    }

    @Test func nonASCIIPassesThroughUnescaped() {
        #expect(JSON.encodeString(["é€😀": "\u{2028}\u{7F}"]) == "{\"é€😀\":\"\u{2028}\u{7F}\"}")
    }

    /// Escapes at every position of long strings (the 8-bytes-at-a-time scan and its tail).
    @Test func escapesAtEveryPosition() throws {
        for len in [1, 7, 8, 9, 15, 16, 17, 40] {
            for at in 0..<len {
                for special in ["\"", "\\", "\n", "\u{1F}"] {
                    var chars = Array(repeating: "a", count: len)
                    chars[at] = special
                    let s = chars.joined()
                    let text = JSON.encodeString(.string(s))
                    #expect(try JSON.parse(text) == .string(s), "len \(len) at \(at)")
                    #expect(text.utf8.count == len + 2 + (special == "\u{1F}" ? 5 : 1))
                }
            }
        }
    }

    @Test func integers() {
        #expect(JSON.encodeString([0, 7, -7, .int(.max), .int(.min)]) ==
            "[0,7,-7,9223372036854775807,-9223372036854775808]")
    }

    @Test(arguments: [
        (0.1, "0.1"), (-0.25, "-0.25"), (40.73612, "40.73612"), (-73.99107, "-73.99107"),
        (3.0, "3"), (-0.0, "0"), (1e14, "100000000000000"), (0.0001, "0.0001"), (123.456, "123.456"),
        (1.0 / 3.0, "0.3333333333333333"), (2.0 / 3.0, "0.6666666666666666"), (0.1 + 0.2, "0.30000000000000004"),
        (1e-5, "1e-05"), (1e15, "1000000000000000.0"), (2.5e20, "2.5e+20"), (1e15 + 0.5, "1000000000000000.5"),
        (123456789012345.6, "123456789012345.6"), (1.7976931348623157e308, "1.7976931348623157e+308"),
    ])
    func doubles(value: Double, text: String) throws {
        #expect(JSON.encodeString(.double(value)) == text)
        #expect(try JSON.parse(text).doubleValue == (value == 0 ? 0 : value))
    }

    @Test func nonFiniteDoublesWriteNull() {
        #expect(JSON.encodeString([.double(.nan), .double(.infinity), .double(-.infinity)]) == "[null,null,null]")
    }

    /// Random doubles of every magnitude read back bit for bit (a fixed-seed generator, so the
    /// run is deterministic).
    @Test func doublesRoundTrip() throws {
        var rng = SplitMix64(seed: 0x5EED)
        for _ in 0..<20_000 {
            let d = Double(bitPattern: rng.next())
            guard d.isFinite else { continue }
            let back = try JSON.parse(JSON.encode(.double(d)))
            #expect(back.doubleValue?.bitPattern == (d == 0 ? 0 : d.bitPattern), "\(d)")
        }
        for _ in 0..<20_000 {
            // Decimal-looking values in the fixed range: coordinates, prices, scores.
            let d = Double(Int64(bitPattern: rng.next()) % 100_000_000_000) / 1e6
            let text = JSON.encodeString(.double(d))
            #expect(try JSON.parse(text).doubleValue == d, "\(text)")
            #expect(text.utf8.count <= 19, "\(text) is not the shortest")
        }
    }

    @Test func spliceAndComposite() throws {
        var w = JSONWriter()
        w.byte(UInt8(ascii: "["))
        w.raw(Array(#"{"raw":true}"#.utf8))
        w.byte(UInt8(ascii: ","))
        w.write(["a": [1, 2.5, "x\ty", nil, false], "b": [:]])
        w.byte(UInt8(ascii: "]"))
        let text = String(decoding: w.bytes, as: UTF8.self)
        #expect(text == #"[{"raw":true},{"a":[1,2.5,"x\ty",null,false],"b":{}}]"#)
        #expect(try JSON.parse(text) == [["raw": true], ["a": [1, 2.5, "x\ty", nil, false], "b": [:]]])
    }
}

/// SplitMix64: a tiny deterministic generator for test inputs.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
