import CJSON
import Testing

/// The C core as the Lua bridge uses it: the tape, the retry size, the formatter's own fallback.
@Suite struct CJSONCoreTests {
    func tokenize(_ text: String, cap: Int = 64, depth: UInt32 = UInt32(CJ_MAX_DEPTH)) -> (Int32, cj_tape, [cj_tok]) {
        var toks = [cj_tok](repeating: cj_tok(), count: cap)
        let bytes = Array(text.utf8)
        var tape = cj_tape()
        let rc = toks.withUnsafeMutableBufferPointer { t in
            tape.toks = t.baseAddress
            tape.cap = UInt32(cap)
            return bytes.withUnsafeBufferPointer { cj_parse(&tape, $0.baseAddress, $0.count, depth) }
        }
        return (rc, tape, Array(toks.prefix(Int(min(tape.count, UInt32(cap))))))
    }

    @Test func tapeLayout() {
        let (rc, tape, toks) = tokenize(#"{"a":[1,2.5,"x\n"],"b":{},"c":null}"#)
        #expect(rc == CJ_OK)
        #expect(tape.count == 10)
        let types = toks.map { Int32($0.type) }
        #expect(types == [CJ_OBJECT, CJ_STRING, CJ_ARRAY, CJ_NUMBER, CJ_NUMBER, CJ_STRING, CJ_STRING, CJ_OBJECT,
                          CJ_STRING, CJ_NULL])
        #expect(toks[0].len == 3 && toks[0].next == 10)         // three members, subtree to the end
        #expect(toks[2].len == 3 && toks[2].next == 6)          // the array and its elements
        #expect(toks[3].flags == UInt8(CJ_F_INTEGER) && toks[4].flags == 0)
        #expect(toks[5].flags == UInt8(CJ_F_ESCAPED) && toks[5].off == 13 && toks[5].len == 3)
        #expect(toks[7].len == 0 && toks[7].next == 8)          // the empty object "b"
    }

    @Test func fullTapeReportsTheExactSize() {
        let text = "[" + Array(repeating: "1", count: 100).joined(separator: ",") + "]"
        let (rc, tape, _) = tokenize(text, cap: 10)
        #expect(rc == CJ_EFULL)
        #expect(tape.count == 101)
        let (rc2, _, toks) = tokenize(text, cap: 101)
        #expect(rc2 == CJ_OK)
        #expect(toks[0].len == 100 && toks[0].next == 101)
        // Errors win over a full tape.
        let (rc3, tape3, _) = tokenize(text + "x", cap: 10)
        #expect(rc3 == CJ_ESYNTAX && tape3.err_off == UInt32(text.utf8.count))
    }

    @Test func depthArgument() {
        #expect(tokenize("[[[]]]", depth: 3).0 == CJ_OK)
        let (rc, tape, _) = tokenize("[[[]]]", depth: 2)
        #expect(rc == CJ_ESYNTAX && String(cString: tape.err) == "nesting too deep" && tape.err_off == 2)
    }

    func format(_ d: Double) -> String {
        var buf = [CChar](repeating: 0, count: Int(CJ_DOUBLE_MAX))
        let n = cj_format_double(d, &buf)
        return String(decoding: buf.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    @Test func formatterOutsideTheFixedRange() {
        #expect(format(3) == "3")
        #expect(format(-0.0) == "-0")
        #expect(format(1e-7) == "1e-07")
        #expect(format(2.5e20) == "2.5e+20")
        #expect(format(1.5e-10) == "1.5e-10")
        #expect(format(.leastNonzeroMagnitude) == "4.94065645841247e-324")   // reads back; not the shortest
        var rng = SplitMix64(seed: 42)
        for _ in 0..<5000 {
            let d = Double(bitPattern: rng.next())
            guard d.isFinite else { continue }
            #expect(Double(format(d))?.bitPattern == d.bitPattern)
        }
    }

    @Test func unescapeAndNumbers() {
        let raw = Array(#"a\u00e9\ud83d\ude00\/\"b"#.utf8)
        var out = [UInt8](repeating: 0, count: raw.count)
        let n = cj_unescape(&out, raw, raw.count)
        #expect(String(decoding: out.prefix(n), as: UTF8.self) == "aé😀/\"b")
        var iv: Int64 = 0
        var dv = 0.0
        #expect(cj_number("-42", 3, &iv, &dv) == CJ_NUM_INT && iv == -42)
        #expect(cj_number("1e999", 5, &iv, &dv) == CJ_NUM_RANGE && dv == .infinity)
        #expect(cj_number("-1e999", 6, &iv, &dv) == CJ_NUM_RANGE && dv == -.infinity)
    }

    @Test func utf8Validator() {
        #expect(cj_utf8_valid("plain ascii, long enough for the fast path", 43) == 1)
        let good: [UInt8] = Array("é€😀\u{10FFFF}".utf8)
        #expect(cj_utf8_valid(good, good.count) == 1)
        for bad: [UInt8] in [[0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE2, 0x82], [0xFF]] {
            #expect(cj_utf8_valid(bad, bad.count) == 0)
        }
    }
}
