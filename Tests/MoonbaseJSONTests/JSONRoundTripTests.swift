import Testing
@testable import MoonbaseJSON
import MoonbaseCore

@Suite struct JSONRoundTripTests {
    @Test(arguments: [
        #"{"a":1,"b":[true,false,null],"c":"x\"y\\z\n","d":1.5,"e":{"f":-2}}"#,
        #"[]"#, #"{}"#, #""\u00e9\ud83d\ude00""#, #"-0.25"#, #"9007199254740993"#,
    ])
    func roundTrip(text: String) throws {
        let v = try JSON.parse(text)
        let again = try JSON.parse(JSON.encodeString(v))
        #expect(v == again)
    }

    @Test(arguments: [#"{"a":}"#, #"[1,]"#, #"{"a":1"#, #"01"#, #""\x""#, "", #"{"a" 1}"#, "nul", #""\ud800""#])
    func rejectsMalformed(text: String) {
        #expect(throws: ParseError.self) { try JSON.parse(text) }
    }

    @Test func integersStayIntegers() throws {
        #expect(try JSON.parse("42") == .int(42))
        #expect(try JSON.parse("42.5") == .double(42.5))
        #expect(JSON.encodeString(.double(3.0)) == "3")
        #expect(JSON.encodeString(["k": "a\u{1}"]) == #"{"k":"a\u0001"}"#)
    }
}
