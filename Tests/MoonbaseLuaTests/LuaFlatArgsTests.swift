import MoonbaseCore
import MoonbaseJSON
import Synchronization
import Testing
@testable import MoonbaseLua

/// Records the arguments of every `db.find` call as the host received them.
private final class ArgsHost: CloudHostAPI {
    let seen = Mutex<[[LuaValue]]>([])
    func call(_ ns: String, _ name: String, _ args: [LuaValue], _ ctx: LuaCallContext) throws(ParseError) -> JSONValue {
        seen.withLock { $0.append(args) }
        return .null
    }
}

/// Table arguments of host functions: flat tables of scalars cross as a tape (`LB_FLAT`), every
/// other table as JSON text. Whichever way a table goes, the host must receive what the JSON
/// text of that table parses to, and a table JSON cannot encode must fail as it always did.
@Suite struct LuaFlatArgsTests {
    /// The host's view of `db.find("C", <lua>)`.
    private func received(_ lua: String) throws -> JSONValue? {
        let host = ArgsHost()
        let vm = try makeVM("cloud.define('t', function(req)\n db.find('C', \(lua))\nend)", host: host)
        _ = try vm.runFunction("t", params: [:], request: CloudRequest(), limits: .quick())
        return host.seen.withLock { $0.last?.dropFirst().first?.json }
    }

    @Test(arguments: [
        // flat: the tape
        ("{}", "{}"),
        ("{n = 5}", #"{"n":5}"#),
        ("{slug = 'a-b', n = -7, ok = true, no = false}", #"{"slug":"a-b","n":-7,"ok":true,"no":false}"#),
        ("{x = 3.0, y = -0.5, z = 1e300, w = 2^53}", #"{"x":3.0,"y":-0.5,"z":1e300,"w":9007199254740992.0}"#),
        ("{big = math.maxinteger, small = math.mininteger}", #"{"big":9223372036854775807,"small":-9223372036854775808}"#),
        ("{s = 'caf\u{e9} \u{1F600}', e = ''}", #"{"s":"caf\u00e9 \ud83d\ude00","e":""}"#),
        ("{nul = 'a\\0b', q = '\"\\\\'}", #"{"nul":"a\u0000b","q":"\"\\"}"#),
        ("{gone = json.null}", #"{"gone":null}"#),
        ("{master = true}", #"{"master":true}"#),
        // not flat: JSON text, the same values
        ("{1, 2}", "[1,2]"),
        ("json.array()", "[]"),
        ("{loc = {lat = 1}}", #"{"loc":{"lat":1}}"#),
        ("{[1] = 'a', k = 'b'}", #"{"1":"a","k":"b"}"#),
        ("setmetatable({a = 1}, {})", #"{"a":1}"#),
    ])
    func tablesArriveAsTheirJSON(lua: String, json: String) throws {
        // Lua hands a table's members over in its own order: compare objects as dictionaries.
        func unordered(_ v: JSONValue?) -> [String: JSONValue]? {
            v?.objectValue.map { o in Dictionary(o.entries.map { ($0.key, $0.value) }, uniquingKeysWith: { a, _ in a }) }
        }
        let got = try received(lua)
        let want = try JSON.parse(Array(json.utf8))
        if want.objectValue != nil {
            #expect(unordered(got) == unordered(want), "\(lua)")
        } else {
            #expect(got == want, "\(lua)")
        }
    }

    /// Sixteen members fit the tape, a seventeenth sends the table as JSON; a key over 255 bytes
    /// and a string of any length both arrive whole.
    @Test func largeTablesAndLongStrings() throws {
        for n in [16, 17, 40] {
            let lua = "(function() local t = {} for i = 1, \(n) do t['k' .. i] = i end return t end)()"
            let got = try #require(try received(lua)?.objectValue)
            #expect(got.count == n)
            for i in 1...n { #expect(got["k\(i)"] == .int(Int64(i))) }
        }
        let longKey = try #require(try received("{[string.rep('k', 300)] = 1}")?.objectValue)
        #expect(longKey[String(repeating: "k", count: 300)] == .int(1))
        let longValue = try #require(try received("{v = string.rep('ab', 5000)}")?.objectValue)
        #expect(longValue["v"] == .string(String(repeating: "ab", count: 5000)))
    }

    /// What JSON cannot carry still fails the call, with the encoder's message.
    @Test(arguments: [
        ("{s = 'a\\255b'}", "not valid UTF-8"),
        ("{['\\255'] = 1}", "not valid UTF-8"),
        ("{x = 0/0}", "non-finite"),
        ("{x = math.huge}", "non-finite"),
        ("{f = print}", "cannot encode"),
    ])
    func unencodableTablesFail(lua: String, message: String) throws {
        let e = failure { try received(lua) }
        #expect(e?.message.contains(message) == true, "\(lua): \(String(describing: e))")
    }

    /// Several table arguments in one call each keep their own tape.
    @Test func severalTablesInOneCall() throws {
        let host = ArgsHost()
        let vm = try makeVM("cloud.define('t', function(req)\n db.find('C', {a = 'x'}, {master = true, limit = 3})\nend)", host: host)
        _ = try vm.runFunction("t", params: [:], request: CloudRequest(), limits: .quick())
        let args = try #require(host.seen.withLock { $0.last })
        #expect(args.count == 3)
        #expect(args[1].json == .object(["a": "x"]))
        let opts = try #require(args[2].objectValue)
        #expect(opts.count == 2 && opts["master"] == .bool(true) && opts["limit"] == .int(3))
    }
}
