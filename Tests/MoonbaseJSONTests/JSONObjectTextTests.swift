import Testing
import MoonbaseCore
@testable import MoonbaseJSON

/// `JSON.parseObject(_:keepingText:)`: an object's members as values, except one kept as the
/// byte range of its text (how a Lua route's `json` is sent as the bridge wrote it).
@Suite struct JSONObjectTextTests {
    /// The members and the kept member's text, for `text`.
    func split(_ text: String, _ key: String = "json") throws -> (JSONObject, String?)? {
        let bytes = Array(text.utf8)
        let r = try bytes.withUnsafeBufferPointer { buf throws(ParseError) in try JSON.parseObject(buf, keepingText: key) }
        guard let (members, range) = r else { return nil }
        return (members, range.map { String(decoding: bytes[$0], as: UTF8.self) })
    }

    @Test(arguments: [
        // Every kind of value, as the first, a middle and the last member.
        (#"{"json":{"a":[1,{"b":"}"}]},"status":201}"#, #"{"a":[1,{"b":"}"}]}"#),
        (#"{"status":201,"json":[1,2,[3]],"body":"x"}"#, "[1,2,[3]]"),
        (#"{"status":201,"json":"a \"quoted\" }, string"}"#, #""a \"quoted\" }, string""#),
        (#"{"status":201,"json":-12.5e3}"#, "-12.5e3"),
        (#"{"json":null,"status":201}"#, "null"),
        (#"{"status":201,"json":false}"#, "false"),
        (#"{"status":201,"json":{}}"#, "{}"),
        // White space around tokens (text not written by the bridge) is left out.
        ("{ \"status\" : 201 ,\n \"json\" :\t[ 1 , 2 ] \r\n, \"body\": \"x\" }", "[ 1 , 2 ]"),
        ("{\"status\":201, \"json\" : \"s\"  }  ", "\"s\""),
    ])
    func keepsTheMemberText(text: String, kept: String) throws {
        let (members, json) = try #require(try split(text))
        #expect(json == kept)
        #expect(members["status"] == .int(201))
        #expect(members["json"] == nil)
        // The kept text is the member's value exactly: parsed alone, it equals the whole parse's.
        let whole = try #require(JSON.parse(text).objectValue)
        #expect(try JSON.parse(try #require(json)) == whole["json"])
        #expect(members.count == whole.count - 1)
    }

    @Test func withoutTheMemberEverythingIsParsed() throws {
        let (members, json) = try #require(try split(#"{"status":204,"headers":{"X-A":"1"}}"#))
        #expect(json == nil)
        #expect(JSONValue.object(members) == (try JSON.parse(#"{"status":204,"headers":{"X-A":"1"}}"#)))
    }

    @Test func otherDocumentsAreNotObjects() throws {
        #expect(try split("[1,2]") == nil)
        #expect(try split(#""json""#) == nil)
        #expect(try split("null") == nil)
        #expect(try split("3") == nil)
    }

    @Test func invalidTextThrowsLikeParse() {
        for text in [#"{"json":[1,2}"#, #"{"json":}"#, "", "{"] {
            #expect(throws: ParseError.self) { try split(text) }
        }
    }

    @Test func largeObjectsUseTheHeapTape() throws {
        // More tokens than the stack tape holds: the document is tokenized again into a tape
        // of its own size, and the kept text is still exact.
        let items = (0..<500).map { #"{"n":\#($0)}"# }.joined(separator: ",")
        let text = #"{"before":[\#(items)],"json":[\#(items)],"status":200}"#
        let (members, json) = try #require(try split(text))
        #expect(json == "[\(items)]")
        #expect(members["before"]?.arrayValue?.count == 500)
        #expect(members["status"] == .int(200))
    }
}
