import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// Turns class rows (`objectId, createdAt, updatedAt, ACL, data` at columns 0…4) into Parse's
/// JSON: `{"objectId","createdAt","updatedAt","ACL"?, …fields}` with ISO dates.
///
/// Two paths: `writeSpliced` copies the stored `data` text into the output without parsing it
/// (the hot path, for classes whose `data` holds only public fields); `object` parses the row and
/// removes what a reader must not see, by the one rule `ProtectedFields.hides`.
public enum RowSerializer {
    /// Whether rows of `className` may be spliced as stored (no hidden fields to strip).
    public static func canSplice(_ className: String) -> Bool { ProtectedFields.canSplice(className) }

    /// Appends one row as a JSON object, splicing the stored `data` bytes.
    public static func writeSpliced(_ s: Statement, into w: inout JSONWriter) {
        w.raw("{\"objectId\":")
        s.withBytes(0) { w.string(utf8: $0) }
        w.raw(",\"createdAt\":\"")
        ISO8601.append(millis: s.int64(1), to: &w.bytes)
        w.raw("\",\"updatedAt\":\"")
        ISO8601.append(millis: s.int64(2), to: &w.bytes)
        w.byte(UInt8(ascii: "\""))
        if !s.isNull(3) {
            w.raw(",\"ACL\":")
            s.withBytes(3) { w.raw($0) }
        }
        s.withBytes(4) { (data: UnsafeBufferPointer<UInt8>) in
            // data is a JSON object: drop its '{', and its '}' too when it is empty.
            var i = 0
            while i < data.count, data[i] != UInt8(ascii: "{") { i += 1 }
            var j = i + 1
            while j < data.count, data[j] == 0x20 || data[j] == 0x0A || data[j] == 0x09 || data[j] == 0x0D { j += 1 }
            if j >= data.count || data[j] == UInt8(ascii: "}") {
                w.byte(UInt8(ascii: "}"))
            } else {
                w.byte(UInt8(ascii: ","))
                w.raw(UnsafeBufferPointer(rebasing: data[j...]))
            }
        }
    }

    /// The row as a JSON object with hidden fields removed for `identity`.
    public static func object(_ s: Statement, className: String, identity: Identity) throws(ParseError) -> JSONObject {
        let objectId = s.text(0) ?? ""
        var o = JSONObject()
        o["objectId"] = .string(objectId)
        o["createdAt"] = .string(ISO8601.format(millis: s.int64(1)))
        o["updatedAt"] = .string(ISO8601.format(millis: s.int64(2)))
        if !s.isNull(3) {
            o["ACL"] = try s.withBytes(3) { (b: UnsafeBufferPointer<UInt8>) throws(ParseError) -> JSONValue in try JSON.parse(b) }
        }
        let data = try s.withBytes(4) { (b: UnsafeBufferPointer<UInt8>) throws(ParseError) -> JSONValue in try JSON.parse(b) }
        for e in data.objectValue ?? [:]
        where !ProtectedFields.hides(e.key, className: className, objectId: objectId, viewer: identity) {
            o.entries.append(JSONObject.Entry(e.key, e.value))
        }
        return o
    }
}
