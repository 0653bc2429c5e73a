import MoonbaseCore
import MoonbaseJSON

extension StoredObject {
    /// The object in Parse's response shape: `objectId`, `createdAt`, `updatedAt` (ISO), `ACL`
    /// when set, then the fields `viewer` may see (`ProtectedFields.hides`). Classes with nothing
    /// to hide splice the stored `data` text without parsing it.
    public func write(to w: inout JSONWriter, viewer: Identity) {
        w.raw("{\"objectId\":")
        w.string(objectId)
        w.raw(",\"createdAt\":\"")
        ISO8601.append(millis: createdAt, to: &w.bytes)
        w.raw("\",\"updatedAt\":\"")
        ISO8601.append(millis: updatedAt, to: &w.bytes)
        w.byte(UInt8(ascii: "\""))
        if let acl {
            w.raw(",\"ACL\":")
            w.raw(acl)
        }
        if !ProtectedFields.canSplice(className) {
            if let fields = try? self.fields() {
                for e in fields where !ProtectedFields.hides(e.key, className: className, objectId: objectId, viewer: viewer) {
                    w.byte(UInt8(ascii: ","))
                    w.string(e.key)
                    w.byte(UInt8(ascii: ":"))
                    w.write(e.value)
                }
            }
        } else {
            spliceFields(into: &w)
        }
        w.byte(UInt8(ascii: "}"))
    }

    /// Appends `,<members of data>` from the stored text (`{…}` without its braces).
    private func spliceFields(into w: inout JSONWriter) {
        data.withUnsafeBufferPointer { buf in
            var lo = 0, hi = buf.count
            func space(_ c: UInt8) -> Bool { c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 }
            while lo < hi, space(buf[lo]) { lo += 1 }
            while hi > lo, space(buf[hi - 1]) { hi -= 1 }
            guard hi - lo >= 2, buf[lo] == UInt8(ascii: "{"), buf[hi - 1] == UInt8(ascii: "}") else { return }
            lo += 1; hi -= 1
            var k = lo
            while k < hi, space(buf[k]) { k += 1 }
            guard k < hi else { return }
            w.byte(UInt8(ascii: ","))
            w.raw(UnsafeBufferPointer(rebasing: buf[k..<hi]))
        }
    }

    /// Compact JSON bytes of the object as `viewer` may see it (`write(to:viewer:)`).
    public func jsonBytes(for viewer: Identity) -> [UInt8] {
        var w = JSONWriter(capacity: data.count + 128)
        write(to: &w, viewer: viewer)
        return w.bytes
    }

    /// The object as `viewer` may see it, as a `JSONObject` (for triggers and Lua).
    public func json(for viewer: Identity) throws(ParseError) -> JSONObject {
        try JSON.parse(jsonBytes(for: viewer)).objectValue ?? [:]
    }
}
