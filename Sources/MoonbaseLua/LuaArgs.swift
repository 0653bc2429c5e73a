import MoonbaseJSON

#if canImport(Glibc)
import Glibc
#endif

/// A call's argument list as the bridge reads it: the argument tape of `lb_call` (its format is
/// documented in lb_call.c). Strings, booleans and tables of strings (`req.headers`,
/// `req.query`, the path parameters) are copied as bytes; JSON values (`req.params`, objects,
/// users, a route's `json`) are written as JSON text that the bridge decodes.
///
/// Why not JSON text for all of it, as before: the host escaped every header, the bridge
/// tokenized it again, and the argument list was one more Lua table per call: about 11,000 of a
/// Lua route hello's 111,000 instructions (callgrind). The tape is written front to back into
/// one malloc'd buffer (a table's member count, counted by `key`, is patched in at its end) and
/// read without scanning. A class, not an
/// array of bytes: appending through `[UInt8]` cost ~250 instructions per string (two generic
/// appends and their uniqueness checks), as much as the JSON it replaced; here a string is a
/// capacity check and a `memcpy`.
final class LuaArgs {
    private var base: UnsafeMutableRawPointer
    private var capacity: Int
    private(set) var count = 0
    /// Members written so far into the table being written (`object`).
    private var members = 0

    private init(capacity: Int) {
        self.capacity = capacity
        base = malloc(capacity)!
    }

    /// A list of `count` arguments; the caller writes exactly that many values.
    convenience init(count n: Int) {
        self.init(capacity: 512)
        u32(n)
    }

    /// A tape of exactly these bytes (tests of the bridge's checks on malformed tapes).
    convenience init(unchecked raw: [UInt8]) {
        self.init(capacity: max(raw.count, 1))
        raw.withUnsafeBytes { put($0.baseAddress, $0.count) }
    }

    /// The arguments `values`, each as JSON text.
    convenience init(_ values: [JSONValue]) {
        self.init(count: values.count)
        for v in values { json(v) }
    }

    deinit { free(base) }

    /// The tape's bytes, for the call.
    func withBytes<R>(_ body: (UnsafePointer<CChar>, Int) -> R) -> R {
        body(base.assumingMemoryBound(to: CChar.self), count)
    }

    private func reserve(_ n: Int) {
        guard count + n > capacity else { return }
        capacity = max(capacity * 2, count + n)
        base = realloc(base, capacity)!
    }

    private func put(_ p: UnsafeRawPointer?, _ n: Int) {
        reserve(n)
        if n > 0, let p { (base + count).copyMemory(from: p, byteCount: n) }
        count += n
    }

    private func tag(_ c: UInt8) {
        reserve(1)
        base.storeBytes(of: c, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    private func u32(_ n: Int) {
        reserve(4)
        base.storeBytes(of: UInt32(truncatingIfNeeded: n), toByteOffset: count, as: UInt32.self)
        count += 4
    }

    private func counted(_ s: String) {
        var s = s
        s.withUTF8 { u in
            u32(u.count)
            put(u.baseAddress, u.count)
        }
    }

    func string(_ s: String) {
        tag(UInt8(ascii: "S"))
        counted(s)
    }

    /// A string of raw bytes (a request body: Lua strings are bytes and need not be UTF-8).
    func string(bytes b: [UInt8]) {
        tag(UInt8(ascii: "S"))
        u32(b.count)
        b.withUnsafeBytes { put($0.baseAddress, $0.count) }
    }

    func bool(_ b: Bool) {
        tag(UInt8(ascii: b ? "T" : "F"))
    }

    /// A JSON value, written as JSON text.
    func json(_ v: JSONValue) {
        var w = JSONWriter(capacity: 128)
        w.write(v)
        json(text: w.bytes)
    }

    /// JSON text already written (valid JSON: the bridge raises on anything else).
    func json(text: [UInt8]) {
        tag(UInt8(ascii: "J"))
        u32(text.count)
        text.withUnsafeBytes { put($0.baseAddress, $0.count) }
    }

    /// A table member's key (inside `object`); its value follows.
    func key(_ k: String) {
        members += 1
        counted(k)
    }

    /// A table whose members (`key`, then a value, each) `write` writes; a key given twice keeps
    /// its last value (the bridge sets them in order).
    func object(_ write: () -> Void) {
        tag(UInt8(ascii: "O"))
        let at = count
        u32(0)
        let outer = members
        members = 0
        write()
        base.storeBytes(of: UInt32(truncatingIfNeeded: members), toByteOffset: at, as: UInt32.self)
        members = outer
    }

    /// A table of strings.
    func strings(_ pairs: [(String, String)]) {
        object {
            for (k, v) in pairs {
                key(k)
                string(v)
            }
        }
    }
}
