import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Log output format (`--log-format text|json`).
public enum LogFormat: String, Sendable {
    case text, json
}

public enum LogLevel: Int, Sendable, Comparable {
    case debug = 0, info, warn, error
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
    /// Parses `debug`, `info`, `warn` or `error`.
    public init?(name: String) {
        switch name {
        case "debug": self = .debug
        case "info": self = .info
        case "warn": self = .warn
        case "error": self = .error
        default: return nil
        }
    }
    public var name: String {
        switch self {
        case .debug: return "debug"
        case .info: return "info"
        case .warn: return "warn"
        case .error: return "error"
        }
    }
}

/// The host log: one line per event on stderr, each with the request id when there is one.
///
/// Thread-safety: the configuration is atomic; each line goes whole to `LogOutput` (buffered
/// while serving, so lines from different threads never interleave and cost no system call).
public enum Log {
    static let formatRaw = Atomic<Int>(0)  // 0 text, 1 json
    private static let minLevel = Atomic<Int>(LogLevel.info.rawValue)

    public static func configure(format: LogFormat, level: LogLevel = .info) {
        formatRaw.store(format == .json ? 1 : 0, ordering: .relaxed)
        minLevel.store(level.rawValue, ordering: .relaxed)
    }

    public static func enabled(_ level: LogLevel) -> Bool {
        level.rawValue >= minLevel.load(ordering: .relaxed)
    }

    public static func debug(_ msg: @autoclosure () -> String, requestId: String? = nil, fields: [(String, String)] = []) {
        if enabled(.debug) { emit(.debug, msg(), requestId: requestId, fields: fields) }
    }
    public static func info(_ msg: @autoclosure () -> String, requestId: String? = nil, fields: [(String, String)] = []) {
        if enabled(.info) { emit(.info, msg(), requestId: requestId, fields: fields) }
    }
    public static func warn(_ msg: @autoclosure () -> String, requestId: String? = nil, fields: [(String, String)] = []) {
        if enabled(.warn) { emit(.warn, msg(), requestId: requestId, fields: fields) }
    }
    public static func error(_ msg: @autoclosure () -> String, requestId: String? = nil, fields: [(String, String)] = []) {
        if enabled(.error) { emit(.error, msg(), requestId: requestId, fields: fields) }
    }

    /// The last 10,000 lines (host events at the configured level, Cloud Code output at every
    /// level), for `GET /admin/logs`, `moonbase logs` and the dashboard.
    public static let ring = LogRing(capacity: 10_000)

    /// A Cloud Code line (`print`, `log.*`): always kept in the ring, written to stderr when its
    /// level is enabled.
    public static func lua(_ level: LogLevel, _ msg: String, requestId: String?, fields: [(String, String)]) {
        let now = SystemClock().nowMillis()
        ring.append(level, msg, source: "lua", requestId: requestId, fields: fields, time: now)
        if enabled(level) { writeLine(level, msg, requestId: requestId, fields: fields, now: now) }
    }

    public static func emit(_ level: LogLevel, _ msg: String, requestId: String?, fields: [(String, String)]) {
        let now = SystemClock().nowMillis()
        ring.append(level, msg, source: "host", requestId: requestId, fields: fields, time: now)
        writeLine(level, msg, requestId: requestId, fields: fields, now: now)
    }

    static func writeLine(_ level: LogLevel, _ msg: String, requestId: String?, fields: [(String, String)], now: Int64) {
        let ts = ISO8601.format(millis: now)
        var line: String
        if formatRaw.load(ordering: .relaxed) == 1 {
            line = "{\"time\":\"\(ts)\",\"level\":\"\(level.name)\""
            if let requestId { line += ",\"requestId\":\(jsonQuote(requestId))" }
            line += ",\"msg\":\(jsonQuote(msg))"
            for (k, v) in fields { line += ",\(jsonQuote(k)):\(jsonQuote(v))" }
            line += "}\n"
        } else {
            line = "\(ts) \(level.name.uppercased())"
            if let requestId { line += " [\(requestId)]" }
            line += " \(msg)"
            for (k, v) in fields { line += " \(k)=\(v)" }
            line += "\n"
        }
        var l = line
        // Event lines (reloads, jobs, Lua's log.*, failures) are written at once, as a reader
        // of the log expects; only the per-request lines (RequestLog) and debug chatter are
        // buffered, which is where a write per line would cost on the hot path.
        l.withUTF8 { LogOutput.write($0, urgent: level >= .info) }
    }

    /// Minimal JSON string quoting for log lines (the hot-path codec lives in MoonbaseJSON).
    public static func jsonQuote(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if u.value < 0x20 {
                    let hex = String(u.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(u)
                }
            }
        }
        return out + "\""
    }
}
