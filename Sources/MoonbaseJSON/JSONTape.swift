import CJSON
import MoonbaseCore

/// A syntax error found by the C tokenizer (or a number out of range found while reading the
/// tape), turned into `ParseError` 107 by `JSON.parse`.
struct JSONSyntaxError: Error {
    let message: String
    let offset: Int
}

/// Parsing: CJSON's `cj_parse` validates the whole document and writes a flat tape of tokens;
/// this walks the tape and allocates the `JSONValue` tree. Swift touches no byte of syntax.
enum JSONTape {
    /// Tokens that fit in the first, stack-allocated tape (16 bytes each). Swift places a
    /// temporary allocation of up to 1 KiB on the stack unconditionally; a larger one only when
    /// the runtime can tell that the thread's stack has room, which it could not on our server
    /// threads: 256 tokens (4 KiB) were a `malloc` and `free` of 4 KiB on every parse, about
    /// 1,800 instructions, more than tokenizing a small body. 64 tokens hold a request body of a
    /// dozen fields; larger documents are re-tokenized into a heap tape of the exact size the
    /// first pass reported.
    static let stackTokens = 64

    static func parse(_ buf: UnsafeBufferPointer<UInt8>) throws(JSONSyntaxError) -> JSONValue {
        try withTape(buf) { toks throws(JSONSyntaxError) -> JSONValue in
            var r = TapeReader(toks: toks, src: buf.baseAddress!)
            return try r.value()
        }
    }

    /// Runs `body` over the tape of `buf` (its tokens), validated by `cj_parse`.
    private static func withTape<R>(
        _ buf: UnsafeBufferPointer<UInt8>, _ body: (UnsafePointer<cj_tok>) throws(JSONSyntaxError) -> R
    ) throws(JSONSyntaxError) -> R {
        guard let base = buf.baseAddress, buf.count > 0 else {
            throw JSONSyntaxError(message: "unexpected end of input", offset: 0)
        }
        var needed = 0
        let first = withUnsafeTemporaryAllocation(of: cj_tok.self, capacity: stackTokens) { toks in
            Result { () throws(JSONSyntaxError) -> R? in
                guard try tokenize(base, buf.count, toks, needed: &needed) != nil else { return nil }
                return try body(UnsafePointer(toks.baseAddress!))
            }
        }
        if let v = try first.get() { return v }
        // The document is valid but needs more tokens: the first pass counted them.
        let toks = UnsafeMutableBufferPointer<cj_tok>.allocate(capacity: needed)
        defer { toks.deallocate() }
        guard try tokenize(base, buf.count, toks, needed: &needed) != nil else {
            throw JSONSyntaxError(message: "document changed while parsing", offset: 0)
        }
        return try body(UnsafePointer(toks.baseAddress!))
    }

    /// Tokenizes into `toks`: the number of tokens, or nil (and the number it needs in `needed`)
    /// when the tape is too small.
    private static func tokenize(
        _ base: UnsafePointer<UInt8>, _ count: Int, _ toks: UnsafeMutableBufferPointer<cj_tok>,
        needed: inout Int
    ) throws(JSONSyntaxError) -> Int? {
        var tape = cj_tape(toks: toks.baseAddress, cap: UInt32(toks.count), count: 0, err_off: 0, err: nil)
        switch cj_parse(&tape, base, count, UInt32(CJ_MAX_DEPTH)) {
        case CJ_OK:
            return Int(tape.count)
        case CJ_EFULL:
            needed = Int(tape.count)
            return nil
        default:
            let what = tape.err.map { String(cString: $0) } ?? "syntax error"
            throw JSONSyntaxError(message: what, offset: Int(tape.err_off))
        }
    }
}

/// Walks a tape produced by `cj_parse` (valid by construction) in document order.
struct TapeReader {
    let toks: UnsafePointer<cj_tok>
    let src: UnsafePointer<UInt8>
    var i = 0

    mutating func value() throws(JSONSyntaxError) -> JSONValue {
        let t = toks[i]
        i += 1
        switch Int32(t.type) {
        case CJ_OBJECT:
            var entries: [JSONObject.Entry] = []
            entries.reserveCapacity(Int(t.len))
            for _ in 0..<t.len {
                let key = string(toks[i])
                i += 1
                entries.append(JSONObject.Entry(key, try value()))
            }
            return .object(JSONObject(entries))
        case CJ_ARRAY:
            var items: [JSONValue] = []
            items.reserveCapacity(Int(t.len))
            for _ in 0..<t.len { items.append(try value()) }
            return .array(items)
        case CJ_STRING: return .string(string(t))
        case CJ_NUMBER: return try number(t)
        case CJ_TRUE: return .bool(true)
        case CJ_FALSE: return .bool(false)
        default: return .null
        }
    }

    func string(_ t: cj_tok) -> String {
        let start = src + Int(t.off)
        let n = Int(t.len)
        if Int32(t.flags) & CJ_F_ESCAPED == 0 {
            return String(decoding: UnsafeBufferPointer(start: start, count: n), as: UTF8.self)
        }
        return String(unsafeUninitializedCapacity: n) { out in cj_unescape(out.baseAddress!, start, n) }
    }

    func number(_ t: cj_tok) throws(JSONSyntaxError) -> JSONValue {
        var iv: Int64 = 0
        var dv: Double = 0
        switch cj_number(src + Int(t.off), Int(t.len), &iv, &dv) {
        case CJ_NUM_INT: return .int(iv)
        case CJ_NUM_DOUBLE: return .double(dv)
        default: throw JSONSyntaxError(message: "number out of range", offset: Int(t.off))
        }
    }
}
