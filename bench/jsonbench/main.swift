// `swift run -c release jsonbench`: CPU per parse / encode of a 1 KB Parse object with our
// codec (MoonbaseJSON), the JSON budget (≤ 10 µs each way). Run by `make bench`.
import MoonbaseCore
import CJSON
import MoonbaseJSON

let doc = """
{"objectId":"xWMyZ4YEGZ","createdAt":"2026-11-29T20:23:45.678Z","updatedAt":"2026-11-29T20:25:01.002Z",\
"author":{"__type":"Pointer","className":"_User","objectId":"a8Bc9dEf0G"},"authorUsername":"alice",\
"text":"Best flat white in the neighbourhood, \\"worth\\" the queue \\u00e9\\u00e8 — come early, they run out of croissants by ten",\
"category":"Coffee","location":{"__type":"GeoPoint","latitude":40.73612,"longitude":-73.99107},\
"photo":{"__type":"File","name":"0f3a9c1e5b7d4f2a8c6e0b1d3f5a7c9e_photo.jpg","url":"http://127.0.0.1:8080/parse/files/moonbase/0f3a9c1e5b7d4f2a8c6e0b1d3f5a7c9e_photo.jpg"},\
"validityMinutes":180,"expiresAt":{"__type":"Date","iso":"2026-11-29T23:23:45.678Z"},"likesCount":42,"dislikesCount":3,\
"commentsCount":17,"viewsCount":1024,"hideLocation":false,"hideUsername":false,"hideProfilePic":true,\
"tags":["coffee","breakfast","nyc","flatwhite"],"score":0.87312,"ACL":{"*":{"read":true},"a8Bc9dEf0G":{"read":true,"write":true}}}
"""
let bytes = Array(doc.utf8)
let value = try! JSON.parse(bytes)

func measure(_ label: String, _ n: Int, _ body: () -> Void) {
    for _ in 0..<(n / 10) { body() }
    let t0 = threadCPUNanos()
    for _ in 0..<n { body() }
    let per = Double(threadCPUNanos() - t0) / Double(n) / 1000
    print("\(label): \(String(Int(per * 100)).count > 0 ? "" : "")\((per * 100).rounded() / 100) µs CPU per op")
}

print("document: \(bytes.count) bytes")
var sink = 0
for _ in 0..<3 {
    measure("parse  (bytes → JSONValue)", 100_000) {
        if case .object(let o) = try! JSON.parse(bytes) { sink &+= o.count }
    }
    measure("encode (JSONValue → bytes)", 100_000) {
        sink &+= JSON.encode(value).count
    }
}

// A 100-object batch (about 95 KB): more tokens than the stack tape holds, so the tokenizer
// runs twice (count, then fill an exact heap tape).
let batch = Array(("[" + Array(repeating: doc, count: 100).joined(separator: ",") + "]").utf8)
let batchValue = try! JSON.parse(batch)
for _ in 0..<2 {
    measure("parse  100-object batch (\(batch.count / 1000) KB)", 2_000) {
        if case .array(let a) = try! JSON.parse(batch) { sink &+= a.count }
    }
    measure("encode 100-object batch", 2_000) {
        sink &+= JSON.encode(batchValue).count
    }
}

// Per part of the writer: CJSON (what MoonbaseJSON uses) against the former pure-Swift code.
let strings: [String] = {
    var all: [String] = []
    func collect(_ v: JSONValue) {
        switch v {
        case .string(let s): all.append(s)
        case .array(let a): a.forEach(collect)
        case .object(let o): for e in o { all.append(e.key); collect(e.value) }
        default: break
        }
    }
    collect(value)
    return all
}()
let doubles: [Double] = [40.73612, -73.99107, 0.87312, 0.1, 1234.5678, 3.14159265358979, 0.5, 99.25]
let farDoubles: [Double] = [1e-7, 2.5e20, 6.02214076e23, -1.602176634e-19, 1.7976931348623157e308, .leastNonzeroMagnitude, 1e15 + 0.5, 3e-5]
print("parts: \(strings.count) strings (\(strings.reduce(0) { $0 + $1.utf8.count }) bytes); doubles in 1e-4..<1e15 and far from it")
var out: [UInt8] = []
out.reserveCapacity(4096)
for _ in 0..<2 {
    measure("strings, CJSON escaper      ", 100_000) {
        var w = JSONWriter(capacity: 1024)
        for s in strings { w.string(s) }
        sink &+= w.bytes.count
    }
    measure("strings, Swift escaper      ", 100_000) {
        var o: [UInt8] = []
        o.reserveCapacity(1024)
        for var s in strings { s.withUTF8 { swiftEscape(&o, $0) } }
        sink &+= o.count
    }
    measure("8 doubles, cj_format_double ", 100_000) {
        var o: [UInt8] = []
        o.reserveCapacity(256)
        for d in doubles { cDouble(&o, d) }
        sink &+= o.count
    }
    measure("8 doubles, Swift description", 100_000) {
        var o: [UInt8] = []
        o.reserveCapacity(256)
        for d in doubles { swiftDouble(&o, d) }
        sink &+= o.count
    }
    measure("8 far doubles, cj_format_double  ", 100_000) {
        var o: [UInt8] = []
        o.reserveCapacity(256)
        for d in farDoubles { cDouble(&o, d) }
        sink &+= o.count
    }
    measure("8 far doubles, Swift description ", 100_000) {
        var o: [UInt8] = []
        o.reserveCapacity(256)
        for d in farDoubles { swiftDouble(&o, d) }
        sink &+= o.count
    }
}
if sink == 42 { print("") }
