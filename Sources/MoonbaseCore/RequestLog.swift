import Synchronization
extension Log {
    /// The request log: one `info` line per answered request, with the method, path (without
    /// the query string), status, wall time in microseconds, the account it was charged to and
    /// the request id. Built straight into bytes and handed to `LogOutput` (no system call).
    ///
    /// text: `2026-12-01T21:20:00.123Z INFO [rid] POST /parse/classes/Post 201 153us account=ip:127.0.0.1`
    /// json: `{"time":"…","level":"info","requestId":"rid","msg":"request","method":"POST",
    ///        "path":"/parse/classes/Post","status":201,"us":153,"account":"ip:127.0.0.1"}`
    public static func request(method: String, path: String, status: Int, micros: Int, account: String,
                               requestId: String) {
        guard enabled(.info) else { return }
        var line: [UInt8] = []
        line.reserveCapacity(96 + path.utf8.count + account.utf8.count + requestId.utf8.count)
        // The time is written straight into the line (`ISO8601.format` made an array and a
        // String per request for it).
        let now = SystemClock().nowMillis()
        if formatRaw.load(ordering: .relaxed) == 1 {
            line.append(contentsOf: #"{"time":""#.utf8)
            ISO8601.append(millis: now, to: &line)
            line.append(contentsOf: #"","level":"info","requestId":"#.utf8)
            appendQuoted(&line, requestId)
            line.append(contentsOf: #","msg":"request","method":"#.utf8)
            appendQuoted(&line, method)
            line.append(contentsOf: #","path":"#.utf8)
            appendQuoted(&line, path)
            line.append(contentsOf: #","status":"#.utf8)
            appendInt(&line, status)
            line.append(contentsOf: #","us":"#.utf8)
            appendInt(&line, micros)
            line.append(contentsOf: #","account":"#.utf8)
            appendQuoted(&line, account)
            line.append(contentsOf: "}\n".utf8)
        } else {
            ISO8601.append(millis: now, to: &line)
            line.append(contentsOf: " INFO [".utf8)
            line.append(contentsOf: requestId.utf8)
            line.append(contentsOf: "] ".utf8)
            line.append(contentsOf: method.utf8)
            line.append(32)
            appendPlain(&line, path)
            line.append(32)
            appendInt(&line, status)
            line.append(32)
            appendInt(&line, micros)
            line.append(contentsOf: "us account=".utf8)
            appendPlain(&line, account)
            line.append(10)
        }
        line.withUnsafeBufferPointer { LogOutput.write($0) }
    }

    private static func appendInt(_ out: inout [UInt8], _ v: Int) {
        if v < 0 {
            out.append(45)
            appendInt(&out, -v)
            return
        }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var n = 0
        var x = v
        withUnsafeMutableBytes(of: &digits) { d in
            repeat {
                d[n] = UInt8(48 + x % 10)
                x /= 10
                n += 1
            } while x > 0
            while n > 0 {
                n -= 1
                out.append(d[n])
            }
        }
    }

    /// A text-format field: control characters and spaces (which would split the field) as `%XX`.
    /// The usual field has none: it is appended in bulk (byte-at-a-time appends cost about 65
    /// instructions a byte, 2,000 a request).
    private static func appendPlain(_ out: inout [UInt8], _ s: String) {
        var s = s
        let done = s.withUTF8 { buf -> Bool in
            for b in buf where b <= 32 || b == 127 { return false }
            out.append(contentsOf: buf)
            return true
        }
        if done { return }
        for b in s.utf8 {
            if b <= 32 || b == 127 {
                let hex = Array("0123456789ABCDEF".utf8)
                out.append(37)
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 15)])
            } else {
                out.append(b)
            }
        }
    }

    private static func appendQuoted(_ out: inout [UInt8], _ s: String) {
        var plain = true
        for b in s.utf8 where b < 32 || b == 34 || b == 92 {
            plain = false
            break
        }
        if plain {
            out.append(34)
            out.append(contentsOf: s.utf8)
            out.append(34)
        } else {
            out.append(contentsOf: jsonQuote(s).utf8)
        }
    }
}
