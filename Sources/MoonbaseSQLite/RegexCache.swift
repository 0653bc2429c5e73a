import CSQLite
import MoonbaseCore

#if canImport(Glibc)
import Glibc
#endif

/// Compiled POSIX extended regular expressions of one connection: a small LRU keyed by
/// pattern bytes and case flag. Connection-confined like its connection (the SQL function is
/// only ever called on the thread using the connection).
final class RegexCache {
    /// Patterns longer than this are refused: bounded compile cost and state size.
    static let maxPatternBytes = 256
    static let capacity = 16

    private struct Entry {
        let pattern: [UInt8]
        let icase: Bool
        let regex: UnsafeMutablePointer<regex_t>
    }
    private var entries: [Entry] = []  // most recently used last

    deinit {
        for e in entries {
            regfree(e.regex)
            e.regex.deallocate()
        }
    }

    /// The compiled pattern, or a `ParseError` 102 for an over-long, back-referencing or
    /// malformed pattern.
    func regex(_ pattern: UnsafeBufferPointer<UInt8>, icase: Bool) throws(ParseError) -> UnsafeMutablePointer<regex_t> {
        if let i = entries.firstIndex(where: { $0.icase == icase && $0.pattern.elementsEqual(pattern) }) {
            let e = entries.remove(at: i)
            entries.append(e)
            return e.regex
        }
        guard pattern.count <= Self.maxPatternBytes else {
            throw ParseError(.invalidQuery, "$regex pattern is longer than \(Self.maxPatternBytes) bytes")
        }
        try Self.rejectBackReferences(pattern)
        let re = UnsafeMutablePointer<regex_t>.allocate(capacity: 1)
        var flags = REG_EXTENDED | REG_NOSUB
        if icase { flags |= REG_ICASE }
        var text = Array(pattern)
        text.append(0)
        let rc = text.withUnsafeBufferPointer { buf in
            buf.withMemoryRebound(to: CChar.self) { regcomp(re, $0.baseAddress, Int32(flags)) }
        }
        guard rc == 0 else {
            var msg = [CChar](repeating: 0, count: 128)
            regerror(rc, re, &msg, msg.count)
            re.deallocate()
            let text = String(decoding: msg.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw ParseError(.invalidQuery, "invalid $regex: \(text)")
        }
        if entries.count >= Self.capacity {
            let old = entries.removeFirst()
            regfree(old.regex)
            old.regex.deallocate()
        }
        entries.append(Entry(pattern: Array(pattern), icase: icase, regex: re))
        return re
    }

    /// glibc accepts `\1`…`\9` in EREs as an extension; back-references make matching
    /// exponential, so they are ruled out.
    static func rejectBackReferences(_ p: UnsafeBufferPointer<UInt8>) throws(ParseError) {
        var i = 0
        while i < p.count {
            if p[i] == UInt8(ascii: "\\"), i + 1 < p.count {
                if p[i + 1] >= UInt8(ascii: "1") && p[i + 1] <= UInt8(ascii: "9") {
                    throw ParseError(.invalidQuery, "$regex back-references are not supported")
                }
                i += 2
                continue
            }
            i += 1
        }
    }

    var count: Int { entries.count }
}

let regexCacheDestroy: @convention(c) (UnsafeMutableRawPointer?) -> Void = { p in
    if let p { Unmanaged<RegexCache>.fromOpaque(p).release() }
}

/// `regexp(pattern, text)` / `regexp(pattern, text, options)`: 1 when `text` matches the POSIX
/// ERE `pattern` (options containing `i` = case-insensitive), NULL when either is NULL.
let regexpCallback: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = { ctx, argc, argv in
    let cache = Unmanaged<RegexCache>.fromOpaque(sqlite3_user_data(ctx)!).takeUnretainedValue()
    guard let pv = argv?[0], let tv = argv?[1],
          sqlite3_value_type(pv) != SQLITE_NULL, sqlite3_value_type(tv) != SQLITE_NULL else {
        sqlite3_result_null(ctx)
        return
    }
    var icase = false
    if argc == 3, let ov = argv?[2], let o = sqlite3_value_text(ov) {
        let n = Int(sqlite3_value_bytes(ov))
        icase = UnsafeBufferPointer(start: o, count: n).contains(UInt8(ascii: "i"))
    }
    guard let pp = sqlite3_value_text(pv) else { sqlite3_result_null(ctx); return }
    let pattern = UnsafeBufferPointer(start: pp, count: Int(sqlite3_value_bytes(pv)))
    do throws(ParseError) {
        let re = try cache.regex(pattern, icase: icase)
        guard let text = sqlite3_value_text(tv) else { sqlite3_result_null(ctx); return }
        let rc = text.withMemoryRebound(to: CChar.self, capacity: 1) { regexec(re, $0, 0, nil, 0) }
        sqlite3_result_int(ctx, rc == 0 ? 1 : 0)
    } catch {
        sqliteResultError(ctx, error)
    }
}
