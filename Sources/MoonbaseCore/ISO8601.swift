/// ISO-8601 UTC instants with milliseconds (`2026-11-29T20:23:45.678Z`), without Foundation.
///
/// Parse's Date encoding and every date in our responses use this one format, so
/// stored dates compare correctly as text.
public enum ISO8601 {
    /// Formats milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    public static func format(millis: Int64) -> String {
        var out = [UInt8]()
        out.reserveCapacity(24)
        append(millis: millis, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends the 24 bytes of `format(millis:)` to `out` (rows serialised straight into a
    /// response buffer: no intermediate string or array per date).
    public static func append(millis: Int64, to out: inout [UInt8]) {
        var ms = millis % 1000
        var secs = millis / 1000
        if ms < 0 { ms += 1000; secs -= 1 }
        var days = secs / 86400
        var rem = secs % 86400
        if rem < 0 { rem += 86400; days -= 1 }
        let (y, m, d) = civil(fromDays: days)
        let hh = rem / 3600, mm = (rem % 3600) / 60, ss = rem % 60
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 24) { buf in
            let p = buf.baseAddress!
            // Two digits at a time from a table: digit by digit (a division per digit) a date
            // cost a find's row ~480 instructions, about a fifth of that this way.
            let t = digitPairs.utf8Start
            @inline(__always) func two(_ v: Int64, _ at: Int) {
                let k = Int(v) &* 2
                p[at] = t[k]; p[at + 1] = t[k + 1]
            }
            if y >= 0 && y <= 9999 {
                two(y / 100, 0); two(y % 100, 2)
            } else {
                // Years outside 0…9999 (not Parse dates, never stored by us): as before, the last
                // four digits of the year, digit by digit.
                var x = y
                for i in stride(from: 3, through: 0, by: -1) { p[i] = UInt8(truncatingIfNeeded: 48 + x % 10); x /= 10 }
            }
            p[4] = 45; two(m, 5); p[7] = 45; two(d, 8); p[10] = 84
            two(hh, 11); p[13] = 58; two(mm, 14); p[16] = 58; two(ss, 17)
            p[19] = 46; p[20] = UInt8(truncatingIfNeeded: 48 + ms / 100); two(ms % 100, 21); p[23] = 90
            out.append(contentsOf: UnsafeBufferPointer(buf))
        }
    }

    /// "00", "01", … "99".
    static let digitPairs: StaticString = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"

    /// Parses `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS[.fff…]]` with `Z` or `±HH:MM`, or without a zone (UTC).
    /// Returns milliseconds since the epoch, or nil when the text is not such a date.
    public static func parse(_ text: String) -> Int64? {
        let b = Array(text.utf8)
        var i = 0
        func num(_ n: Int) -> Int64? {
            guard i + n <= b.count else { return nil }
            var v: Int64 = 0
            for k in 0..<n {
                let c = b[i + k]
                guard c >= 48 && c <= 57 else { return nil }
                v = v * 10 + Int64(c - 48)
            }
            i += n
            return v
        }
        func expect(_ c: UInt8) -> Bool {
            guard i < b.count, b[i] == c else { return false }
            i += 1
            return true
        }
        guard let y = num(4), expect(45), let mo = num(2), expect(45), let d = num(2) else { return nil }
        guard mo >= 1 && mo <= 12 && d >= 1 && d <= daysIn(month: mo, year: y) else { return nil }
        var hh: Int64 = 0, mi: Int64 = 0, ss: Int64 = 0, ms: Int64 = 0, offset: Int64 = 0
        if i < b.count {
            guard b[i] == 84 || b[i] == 116 || b[i] == 32 else { return nil }
            i += 1
            guard let h = num(2), expect(58), let m = num(2) else { return nil }
            hh = h; mi = m
            if i < b.count && b[i] == 58 {
                i += 1
                guard let s = num(2) else { return nil }
                ss = s
                if i < b.count && b[i] == 46 {
                    i += 1
                    var digits = 0
                    var frac: Int64 = 0
                    while i < b.count, b[i] >= 48 && b[i] <= 57 {
                        if digits < 3 { frac = frac * 10 + Int64(b[i] - 48) }
                        digits += 1
                        i += 1
                    }
                    guard digits > 0 else { return nil }
                    for _ in digits..<3 where digits < 3 { frac *= 10 }
                    ms = frac
                }
            }
            guard hh < 24 && mi < 60 && ss < 61 else { return nil }
            if i < b.count {
                if b[i] == 90 || b[i] == 122 {
                    i += 1
                } else if b[i] == 43 || b[i] == 45 {
                    let sign: Int64 = b[i] == 45 ? -1 : 1
                    i += 1
                    guard let oh = num(2) else { return nil }
                    _ = expect(58)
                    guard let om = num(2) else { return nil }
                    offset = sign * (oh * 60 + om) * 60_000
                } else {
                    return nil
                }
            }
        }
        guard i == b.count else { return nil }
        let days = self.days(fromCivil: y, mo, d)
        return ((days * 86400 + hh * 3600 + mi * 60 + ss) * 1000 + ms) - offset
    }

    static func daysIn(month m: Int64, year y: Int64) -> Int64 {
        switch m {
        case 2: return (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Howard Hinnant's `days_from_civil`.
    public static func days(fromCivil y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }

    /// Howard Hinnant's `civil_from_days`.
    public static func civil(fromDays z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }
}
