import Testing
import MoonbaseCore
@testable import MoonbaseJSON

/// RFC 8259 edge cases of the parser (CJSON's tokenizer + the Swift tape walk).
@Suite struct JSONParseEdgeTests {
    /// The message `JSON.parse` throws for `text`, or nil when it parses.
    func failure(_ text: String) -> String? {
        failure(Array(text.utf8))
    }

    func failure(_ bytes: [UInt8]) -> String? {
        do {
            _ = try JSON.parse(bytes)
            return nil
        } catch {
            #expect(error.code == .invalidJSON)
            return error.message
        }
    }

    @Test func everyEscape() throws {
        let v = try JSON.parse(#""\"\\\/\b\f\n\r\t\u0041\u00e9\u20ac\ud83d\ude00""#)
        #expect(v == .string("\"\\/\u{8}\u{C}\n\r\tAé€😀"))
        // Upper- and lower-case hex digits; an escaped NUL is a character like any other.
        #expect(try JSON.parse(#""\u00C9\u00e9\u0000x""#) == .string("Éé\u{0}x"))
        // Text on both sides of escapes is kept.
        #expect(try JSON.parse(#""ab\ncd\\ef""#) == .string("ab\ncd\\ef"))
    }

    @Test func surrogatePairs() throws {
        #expect(try JSON.parse(#""\uD834\uDD1E""#) == .string("𝄞"))
        #expect(try JSON.parse(#""\udbff\udfff""#) == .string("\u{10FFFF}"))
        #expect(try JSON.parse(#"["\ud800\udc00"]"#) == .array([.string("\u{10000}")]))
    }

    @Test(arguments: [
        (#""\ud800""#, "unpaired surrogate at offset 1"),
        (#""\udc00""#, "unpaired surrogate at offset 1"),
        (#""\ud800x""#, "unpaired surrogate at offset 1"),
        (#""\ud800\u0041""#, "unpaired surrogate at offset 1"),
        (#""\ud800\ud800""#, "unpaired surrogate at offset 1"),
        (#""ab\udfff""#, "unpaired surrogate at offset 3"),
        (#""\ud800\uZZZZ""#, "bad \\u escape at offset 7"),
    ])
    func loneSurrogates(text: String, message: String) {
        #expect(failure(text) == "invalid JSON: \(message)")
    }

    @Test(arguments: [
        (#""\x""#, "bad escape at offset 1"),
        (#""\u12""#, "bad \\u escape at offset 1"),
        (#""\u12G4""#, "bad \\u escape at offset 1"),
        (#""\"#, "unterminated string at offset 0"),
        (#"["abc"#, "unterminated string at offset 1"),
        ("\"a\u{1}b\"", "control character in string at offset 2"),
        ("\"tab\there\"", "control character in string at offset 4"),
    ])
    func badStrings(text: String, message: String) {
        #expect(failure(text) == "invalid JSON: \(message)")
    }

    @Test(arguments: [
        [0x22, 0xFF, 0x22],                    // never valid
        [0x22, 0xC3, 0x22],                    // truncated 2-byte sequence
        [0x22, 0xC0, 0xAF, 0x22],              // overlong "/"
        [0x22, 0xE0, 0x80, 0xAF, 0x22],        // overlong 3-byte
        [0x22, 0xED, 0xA0, 0x80, 0x22],        // UTF-8 encoded surrogate U+D800
        [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],  // beyond U+10FFFF
        [0x22, 0x80, 0x22],                    // lone continuation byte
        [0x22, 0xF0, 0x9F, 0x98, 0x22],        // truncated 4-byte
    ] as [[UInt8]])
    func invalidUTF8(bytes: [UInt8]) {
        #expect(failure(bytes) == "invalid JSON: invalid UTF-8 in string at offset 1")
    }

    @Test func validUTF8Passes() throws {
        let text = "\"aé€😀\u{7F}\u{80}\u{7FF}\u{800}\u{FFFF}\u{10000}\u{10FFFF}\""
        #expect(try JSON.parse(text) == .string(String(text.dropFirst().dropLast())))
        // Long ASCII runs (the 8-bytes-at-a-time path) around a multi-byte character.
        let long = String(repeating: "abcdefgh", count: 20) + "é" + String(repeating: "x", count: 37)
        #expect(try JSON.parse("\"\(long)\"") == .string(long))
    }

    @Test func byteOrderMarkIsRefused() {
        #expect(failure([0xEF, 0xBB, 0xBF] + Array("{}".utf8)) == "invalid JSON: unexpected character at offset 0")
    }

    @Test func nestingLimitIs512() throws {
        let ok = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
        var v = try JSON.parse(ok)
        var depth = 0
        while case .array(let a) = v {
            depth += 1
            v = a.first ?? .null
        }
        #expect(depth == 512)
        let deep = String(repeating: "[", count: 513) + String(repeating: "]", count: 513)
        #expect(failure(deep) == "invalid JSON: nesting too deep at offset 512")
        let objects = String(repeating: #"{"a":"#, count: 513) + "1" + String(repeating: "}", count: 513)
        #expect(failure(objects) == "invalid JSON: nesting too deep at offset \(512 * 5)")
        // Far deeper input fails the same way, without recursion in the tokenizer.
        #expect(failure(String(repeating: "[", count: 100_000))?.hasPrefix("invalid JSON: nesting too deep") == true)
    }

    @Test func integersAndDoubles() throws {
        #expect(try JSON.parse("0") == .int(0))
        #expect(try JSON.parse("-0") == .int(0))                 // an integer literal: int 0
        #expect(try JSON.parse("-0.0") == .double(-0.0))
        #expect(try JSON.parse("-0.0").doubleValue?.sign == .minus)
        #expect(try JSON.parse("9223372036854775807") == .int(.max))
        #expect(try JSON.parse("-9223372036854775808") == .int(.min))
        #expect(try JSON.parse("9223372036854775808") == .double(9223372036854775808.0))
        #expect(try JSON.parse("-9223372036854775809") == .double(-9223372036854775809.0))
        #expect(try JSON.parse("123456789012345678901234567890") == .double(1.2345678901234568e29))
        #expect(try JSON.parse("1e2") == .double(100))
        #expect(try JSON.parse("1E+2") == .double(100))
        #expect(try JSON.parse("2.5e-3") == .double(0.0025))
        #expect(try JSON.parse("-1.5E-300") == .double(-1.5e-300))
        #expect(try JSON.parse("1e-400") == .double(0))          // underflow reads as 0
        #expect(try JSON.parse("0.1") == .double(0.1))
        #expect(try JSON.parse("40.73612") == .double(40.73612))
        #expect(try JSON.parse("1.7976931348623157e308") == .double(.greatestFiniteMagnitude))
        #expect(try JSON.parse("4.9406564584124654e-324") == .double(.leastNonzeroMagnitude))
        // More digits than the fast path takes: strtod decides, correctly rounded.
        #expect(try JSON.parse("0.30000000000000000000001") == .double(0.3))
        #expect(try JSON.parse("9007199254740993.0") == .double(9007199254740992))
        let long = "1." + String(repeating: "0", count: 300) + "1"
        #expect(try JSON.parse(long) == .double(1))
    }

    @Test(arguments: [
        ("1e400", "number out of range at offset 0"),
        ("[-1e999]", "number out of range at offset 1"),
        ("01", "bad number (leading zero) at offset 0"),
        ("-", "bad number at offset 0"),
        ("-a", "bad number at offset 0"),
        ("1.", "bad number at offset 0"),
        ("1.e5", "bad number at offset 0"),
        ("1e", "bad number at offset 0"),
        ("1e+", "bad number at offset 0"),
        (".5", "unexpected character at offset 0"),
        ("+1", "unexpected character at offset 0"),
        ("0x10", "unexpected trailing data at offset 1"),
        ("NaN", "unexpected character at offset 0"),
        ("Infinity", "unexpected character at offset 0"),
    ])
    func badNumbers(text: String, message: String) {
        #expect(failure(text) == "invalid JSON: \(message)")
    }

    @Test(arguments: [
        ("", "unexpected end of input at offset 0"),
        ("   ", "unexpected end of input at offset 3"),
        ("{} x", "unexpected trailing data at offset 3"),
        ("[1] [2]", "unexpected trailing data at offset 4"),
        ("1 2", "unexpected trailing data at offset 2"),
        (#"{"a":1}}"#, "unexpected trailing data at offset 7"),
        ("nul", "bad literal at offset 0"),
        ("truex", "unexpected trailing data at offset 4"),
        ("[tru]", "bad literal at offset 1"),
        ("[1,]", "unexpected character at offset 3"),
        ("[1 2]", "expected ',' or ']' at offset 3"),
        (#"{"a":1,}"#, "expected a string key at offset 7"),
        (#"{"a" 1}"#, "expected ':' at offset 5"),
        (#"{"a":1 "b":2}"#, "expected ',' or '}' at offset 7"),
        ("{1:2}", "expected a string key at offset 1"),
        (#"{"a":}"#, "unexpected character at offset 5"),
        ("[", "unexpected end of input at offset 1"),
        (#"{"a":1"#, "unexpected end of input at offset 6"),
        ("[1,", "unexpected end of input at offset 3"),
        ("\u{0B}1", "unexpected character at offset 0"),   // vertical tab is not JSON white space
    ])
    func badStructure(text: String, message: String) {
        #expect(failure(text) == "invalid JSON: \(message)")
    }

    @Test func whiteSpaceAndScalarsAtTheTop() throws {
        #expect(try JSON.parse(" \t\r\n{ \"a\" :\n[ 1 , true , null ] } \n") == ["a": [1, true, nil]])
        #expect(try JSON.parse("\"x\"") == "x")
        #expect(try JSON.parse(" true ") == true)
        #expect(try JSON.parse("null") == .null)
        #expect(try JSON.parse("[]") == .array([]))
        #expect(try JSON.parse("{ }") == .object(JSONObject()))
    }

    @Test func keyOrderAndDuplicatesAreKept() throws {
        guard case .object(let o) = try JSON.parse(#"{"b":1,"a":2,"b":3}"#) else {
            Issue.record("not an object")
            return
        }
        #expect(o.keys == ["b", "a", "b"])
        #expect(o["b"] == .int(1))   // lookups find the first, as before
    }

    /// Documents of more tokens than the stack tape holds take the exact-size retry.
    @Test func largeDocuments() throws {
        let n = 5000
        let text = "[" + (0..<n).map { #"{"i":\#($0),"s":"v\n\#($0)"}"# }.joined(separator: ",") + "]"
        guard case .array(let items) = try JSON.parse(text) else {
            Issue.record("not an array")
            return
        }
        #expect(items.count == n)
        #expect(items[4321] == ["i": 4321, "s": "v\n4321"])
        // A syntax error near the end of a large document is still found, at its offset.
        let broken = String(text.dropLast()) + ",]"
        #expect(failure(broken) == "invalid JSON: unexpected character at offset \(text.utf8.count)")
    }

    @Test func parsesFromStringAndBuffer() throws {
        let text = #"{"k":[1.5,"é"]}"#
        let fromString = try JSON.parse(text)
        let fromBytes = try Array(text.utf8).withUnsafeBufferPointer { buf throws(ParseError) in try JSON.parse(buf) }
        #expect(fromString == fromBytes)
        #expect(fromString == ["k": [1.5, "é"]])
    }
}
