import Foundation

/// A parsed cron schedule: five standard fields, or a macro.
///
/// Semantics are croniter 7.0.0's default mode, which differs from Vixie cron/cronie:
/// - **Day-of-month OR day-of-week.** When both day fields restrict, a day matching *either*
///   fires; a field counts as restricting unless it is `*` (or lists every value, see
///   `CronField`). Vixie cron treats any field *starting* with `*` (e.g. `*/2`) as unrestricted
///   and then ANDs; croniter (and we) OR `*/2` too: `0 0 */2 * mon` fires on odd days *and* on
///   Mondays.
/// - **Daylight saving.** A fixed-time job whose local time falls in a spring-forward gap fires at
///   the first valid minute after the gap (`30 2 * * *` in New York fires at 03:00 on that day),
///   while a job with `*` hours skips the missing hour. On a fall-back the repeated hour can fire
///   twice: a job at `30 1 * * *` fires at 01:30 EDT and again at 01:30 EST (cronie fires once).
/// - **Ranges** may wrap (`fri-mon`, `50-10`), `A/S` means `A-MAX/S`, and an equal range such as
///   `5-5` means the whole field (croniter's reading).
///
/// Macros: `@yearly`/`@annually` (`0 0 1 1 *`), `@monthly` (`0 0 1 * *`), `@weekly`
/// (`0 0 * * 0`), `@daily`/`@midnight` (`0 0 * * *`), `@hourly` (`0 * * * *`), and `@reboot`,
/// which has no calendar times (`nextDate` is nil) and fires once per process start.
///
/// ```swift
/// let every5 = try CronExpression(parsing: "*/5 * * * *")
/// let next = every5.nextDate(after: nowMillis, in: TimeZone(identifier: "UTC")!)
/// ```
public struct CronExpression: Sendable, Equatable, CustomStringConvertible {
    /// The text as written (trimmed).
    public let source: String
    /// True for `@reboot`.
    public let isReboot: Bool
    public let minute: CronField
    public let hour: CronField
    public let dayOfMonth: CronField
    public let month: CronField
    public let dayOfWeek: CronField

    /// Both day fields restrict, so a day matching either one matches (croniter's `day_or`).
    public var daysAreOred: Bool { !dayOfMonth.isStar && !dayOfWeek.isStar }

    public var description: String { source }

    /// Parses an expression: five fields separated by spaces or tabs, or a macro.
    ///
    /// - Throws: `CronSyntaxError` with line 1 and the 1-based column of the fault.
    public init(parsing text: String) throws(CronSyntaxError) {
        let raw = Array(text.utf8)
        var lo = 0, hi = raw.count
        while lo < hi && Self.isSpace(raw[lo]) { lo += 1 }
        while hi > lo && Self.isSpace(raw[hi - 1]) { hi -= 1 }
        let bytes = raw[lo..<hi].map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }
        let base = Self.column(of: lo, in: raw)
        source = String(decoding: raw[lo..<hi], as: UTF8.self)
        if bytes.isEmpty { throw CronSyntaxError("empty cron expression", column: base) }

        if bytes.first == UInt8(ascii: "@") {
            let name = String(decoding: bytes, as: UTF8.self)
            let expanded: String
            switch name {
            case "@yearly", "@annually": expanded = "0 0 1 1 *"
            case "@monthly": expanded = "0 0 1 * *"
            case "@weekly": expanded = "0 0 * * 0"
            case "@daily", "@midnight": expanded = "0 0 * * *"
            case "@hourly": expanded = "0 * * * *"
            case "@reboot": expanded = "* * * * *"
            default:
                throw CronSyntaxError("unknown macro '\(source)' (use @yearly @annually @monthly @weekly @daily @midnight @hourly @reboot)", column: base)
            }
            let fields = try Self.fields(Array(expanded.utf8), base: base)
            (minute, hour, dayOfMonth, month, dayOfWeek) = fields
            isReboot = name == "@reboot"
            return
        }
        (minute, hour, dayOfMonth, month, dayOfWeek) = try Self.fields(bytes, base: base)
        isReboot = false
    }

    private static func fields(_ bytes: [UInt8], base: Int) throws(CronSyntaxError)
        -> (CronField, CronField, CronField, CronField, CronField) {
        var tokens: [(start: Int, text: [UInt8])] = []
        var i = 0
        while i < bytes.count {
            if isSpace(bytes[i]) { i += 1; continue }
            let start = i
            while i < bytes.count && !isSpace(bytes[i]) { i += 1 }
            tokens.append((start, Array(bytes[start..<i])))
        }
        guard tokens.count == 5 else {
            let at = tokens.count > 5 ? tokens[5].start : bytes.count
            throw CronSyntaxError("expected 5 fields (minute hour day-of-month month day-of-week), found \(tokens.count)",
                                  column: base + column(of: at, in: bytes) - 1)
        }
        let star = UInt8(ascii: "*")
        var out: [CronField] = []
        for (k, kind) in CronField.Kind.allCases.enumerated() {
            let other: Bool
            switch kind {
            case .dayOfMonth: other = tokens[4].text.contains(star)
            case .dayOfWeek: other = tokens[2].text.contains(star)
            default: other = false
            }
            out.append(try CronField.expand(tokens[k].text, kind: kind, column: base + column(of: tokens[k].start, in: bytes) - 1,
                                            otherDayFieldHasStar: other))
        }
        return (out[0], out[1], out[2], out[3], out[4])
    }

    /// croniter splits fields on ASCII whitespace only.
    static func isSpace(_ c: UInt8) -> Bool { c == 32 || (c >= 9 && c <= 13) }

    /// 1-based character column of byte offset `i` (UTF-8 continuation bytes do not count).
    static func column(of i: Int, in bytes: some Collection<UInt8>) -> Int {
        var col = 1
        for b in bytes.prefix(i) where b & 0xC0 != 0x80 { col += 1 }
        return col
    }
}
