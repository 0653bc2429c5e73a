/// One of the five fields of a standard cron expression, expanded to the set of values it allows.
///
/// Expansion follows croniter 7.0.0's `_expand` for the standard subset, quirks included, so
/// that `nextDate` agrees with croniter on every expression both accept:
/// - `*/S` is `MIN-MAX/S`; `A/S` is `A-MAX/S`, except that when `A` is the field maximum
///   (`59/15`, `dec/3`, `6/2` in day-of-week) it is the single value `A`.
/// - An equal range written as one (`5-5`, `jan-jan`, `5-5/2`) means the whole field
///   (stepped when a step is given), as in croniter.
/// - A range whose start is above its end wraps around the field (`50-10` in minutes is 50–59 and
///   0–10; `fri-mon` is Fri, Sat, Sun, Mon). With a step, the restart after the wrap is
///   croniter's: `50-10/7` is 50, 57, 5.
/// - Day-of-week 7 is Sunday (0), also as a range end (`1-7` is every day).
/// - The field is unrestricted (`isStar`) when it holds a `*` element, or when it lists every
///   value of its field; for day-of-month and day-of-week the latter only when the *other* day
///   field's text contains a `*` (croniter's guard, so `1-31` with `mon` stays an OR of both).
///
/// Not supported (rejected with a position): `L`, `W`, `#`, `?`, `H`/`R` hashing, seconds and
/// year fields. Values are checked against the field's bounds; names are the three-letter
/// English abbreviations (`jan`…`dec` in the month field, `sun`…`sat` in day-of-week),
/// case-insensitive.
public struct CronField: Sendable, Equatable {
    /// Which field this is; its raw value is croniter's field index.
    public enum Kind: Int, Sendable, CaseIterable {
        case minute = 0, hour, dayOfMonth, month, dayOfWeek

        /// Smallest and largest value (croniter's `RANGES`).
        public var bounds: (min: Int, max: Int) {
            switch self {
            case .minute: return (0, 59)
            case .hour: return (0, 23)
            case .dayOfMonth: return (1, 31)
            case .month: return (1, 12)
            case .dayOfWeek: return (0, 6)
            }
        }

        /// How many values mean "every value" (croniter's `LEN_MEANS_ALL`).
        var allCount: Int { bounds.max - bounds.min + 1 }

        /// Used in error messages.
        public var name: String {
            switch self {
            case .minute: return "minute"
            case .hour: return "hour"
            case .dayOfMonth: return "day-of-month"
            case .month: return "month"
            case .dayOfWeek: return "day-of-week"
            }
        }

        func value(ofName name: [UInt8]) -> Int? {
            let table: [String]
            switch self {
            case .month: table = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
            case .dayOfWeek: table = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
            default: return nil
            }
            guard let i = table.firstIndex(where: { Array($0.utf8) == name }) else { return nil }
            return self == .month ? i + 1 : i
        }

        /// croniter's `value_alias` for five-field expressions: only day-of-week 7 → 0.
        func alias(_ v: Int) -> Int { self == .dayOfWeek && v == 7 ? 0 : v }
    }

    /// The field.
    public let kind: Kind
    /// True when the field does not restrict (croniter's expanded `["*"]`).
    public let isStar: Bool
    /// The allowed values, ascending (all values of the field when `isStar`).
    public let values: [Int]

    init(kind: Kind, isStar: Bool, values: [Int]) {
        self.kind = kind
        self.isStar = isStar
        self.values = values
    }

    /// Whether `v` is allowed.
    public func contains(_ v: Int) -> Bool { isStar || values.contains(v) }
}

extension CronField {
    /// Expands one field's text (ASCII, already lowercased).
    ///
    /// - Parameters:
    ///   - text: the field's characters.
    ///   - kind: which field.
    ///   - column: 1-based column of `text` in the expression, for error positions.
    ///   - otherDayFieldHasStar: for the day fields, whether the other day field's text contains `*`.
    /// - Throws: `CronSyntaxError` at the offending element.
    static func expand(_ text: [UInt8], kind: Kind, column: Int,
                       otherDayFieldHasStar: Bool) throws(CronSyntaxError) -> CronField {
        var mask: UInt64 = 0
        var hasStar = false
        var start = 0
        while true {
            var end = start
            while end < text.count && text[end] != UInt8(ascii: ",") { end += 1 }
            let element = Array(text[start..<end])
            let col = column + start
            if element == [UInt8(ascii: "*")] {
                hasStar = true
            } else {
                for v in try expandElement(element, kind: kind, column: col) {
                    guard v >= kind.bounds.min && v <= kind.bounds.max else {
                        throw CronSyntaxError("value \(v) out of range \(kind.bounds.min)-\(kind.bounds.max) in \(kind.name) field", column: col)
                    }
                    mask |= 1 << UInt64(v)
                }
            }
            if end >= text.count { break }
            start = end + 1
        }
        var values: [Int] = []
        for v in kind.bounds.min...kind.bounds.max where mask & (1 << UInt64(v)) != 0 { values.append(v) }
        var star = hasStar
        if !star && values.count == kind.allCount {
            switch kind {
            case .dayOfMonth, .dayOfWeek: star = otherDayFieldHasStar
            default: star = true
            }
        }
        return CronField(kind: kind, isStar: star, values: star ? Array(kind.bounds.min...kind.bounds.max) : values)
    }

    /// One comma-separated element (not a bare `*`): a value, a name, a range, or a step.
    private static func expandElement(_ e: [UInt8], kind: Kind, column: Int) throws(CronSyntaxError) -> [Int] {
        let (lo, hi) = kind.bounds
        func fail(_ message: String) -> CronSyntaxError { CronSyntaxError(message, column: column) }
        if e.isEmpty { throw fail("empty element in \(kind.name) field") }
        // croniter: "*/S" → "MIN-MAX/S"; else "A/S" → "A-MAX/S" (split at the last '/').
        var t = e
        if e.count > 2 && e[0] == UInt8(ascii: "*") && e[1] == UInt8(ascii: "/") {
            t = Array("\(lo)-\(hi)".utf8) + e.dropFirst()
        }
        var m = stepMatch(t)
        var startWithStep = false
        if m == nil, let slash = e.lastIndex(of: UInt8(ascii: "/")), slash > 0, slash < e.count - 1 {
            t = Array(e[..<slash]) + Array("-\(hi)/".utf8) + Array(e[(slash + 1)...])
            m = stepMatch(t)
            startWithStep = m != nil
        }
        guard let (lowText, highText, stepText) = m else {
            if t.first == UInt8(ascii: "-") { throw fail("negative numbers are not allowed in \(kind.name) field") }
            return [kind.alias(try number(t, kind: kind, column: column))]
        }
        let step = stepText.map { digitsValue($0) } ?? 1
        if step == 0 { throw fail("step 0 is not allowed in \(kind.name) field") }
        var low = kind.alias(try number(lowText, kind: kind, column: column))
        var high = kind.alias(try number(highText, kind: kind, column: column))
        if max(low, high) > hi { throw fail("range \(String(decoding: lowText, as: UTF8.self))-\(String(decoding: highText, as: UTF8.self)) out of range \(lo)-\(hi) in \(kind.name) field") }
        let startAtFieldMax = startWithStep && low == high
        if low == high && !startWithStep { (low, high) = (lo, hi) }
        if startAtFieldMax { return [low] }
        if low <= high { return Array(stride(from: low, through: high, by: step)) }
        // Wrap-around range, exactly as croniter builds it (including where it restarts).
        var out = Array(stride(from: low, through: hi, by: step))
        var toSkip = 0
        if let last = out.last {
            let alreadySkipped = hi - last
            let curpos = last - lo
            if curpos + step > hi - lo + 1 && alreadySkipped < step { toSkip = step - alreadySkipped }
        }
        if lo + toSkip <= high { out += Array(stride(from: lo + toSkip, through: high, by: step)) }
        return out
    }

    private static func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }

    /// croniter's `^([^-]+)-([^-/]+)(/(\d+))?$`.
    private static func stepMatch(_ t: [UInt8]) -> ([UInt8], [UInt8], [UInt8]?)? {
        guard let dash = t.firstIndex(of: UInt8(ascii: "-")), dash > 0 else { return nil }
        let rest = t[(dash + 1)...]
        guard !rest.contains(UInt8(ascii: "-")) else { return nil }
        let slash = rest.firstIndex(of: UInt8(ascii: "/")) ?? t.count
        let high = Array(t[(dash + 1)..<slash])
        guard !high.isEmpty else { return nil }
        if slash == t.count { return (Array(t[..<dash]), high, nil) }
        let step = Array(t[(slash + 1)...])
        guard !step.isEmpty, step.allSatisfy(isDigit) else { return nil }
        return (Array(t[..<dash]), high, step)
    }

    /// Decimal digits as a value, saturating far above any field's range (croniter uses
    /// unbounded integers; anything this large is out of range or a step wider than the field).
    private static func digitsValue(_ d: [UInt8]) -> Int {
        var v = 0
        for c in d { v = min(v * 10 + Int(c - UInt8(ascii: "0")), 1_000_000) }
        return v
    }

    /// A number or a name of this field.
    private static func number(_ t: [UInt8], kind: Kind, column: Int) throws(CronSyntaxError) -> Int {
        if !t.isEmpty && t.allSatisfy(isDigit) { return digitsValue(t) }
        if let v = kind.value(ofName: t) { return v }
        let text = String(decoding: t, as: UTF8.self)
        let hint = kind == .month || kind == .dayOfWeek ? "a number or a name" : "a number"
        throw CronSyntaxError("'\(text)' is not \(hint) in \(kind.name) field"
                              + " (supported: numbers, names, *, ranges a-b, steps /n, lists; not L W # ? H)", column: column)
    }
}
