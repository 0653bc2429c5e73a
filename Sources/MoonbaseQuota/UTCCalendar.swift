import MoonbaseCore

/// UTC period arithmetic on milliseconds since the epoch: hours for usage rows, minutes for rate
/// windows, months for the app quota (month boundaries are UTC).
public enum UTCCalendar {
    public static let minuteMillis: Int64 = 60_000
    public static let hourMillis: Int64 = 3_600_000
    public static let dayMillis: Int64 = 86_400_000

    /// Floor division that also rounds negative instants down.
    @inline(__always)
    public static func floor(_ t: Int64, _ unit: Int64) -> Int64 {
        let q = t / unit
        return (t % unit < 0 ? q - 1 : q) * unit
    }

    /// Start of the UTC minute containing `t`.
    public static func minuteStart(_ t: Int64) -> Int64 { floor(t, minuteMillis) }

    /// Start of the UTC hour containing `t`.
    public static func hourStart(_ t: Int64) -> Int64 { floor(t, hourMillis) }

    /// First hour start at or after `t`.
    public static func hourCeil(_ t: Int64) -> Int64 {
        let s = hourStart(t)
        return s == t ? t : s + hourMillis
    }

    /// Months since January 1970 for the month containing `t` (0 = 1970-01).
    public static func monthIndex(_ t: Int64) -> Int64 {
        let (y, m, _) = ISO8601.civil(fromDays: floor(t, dayMillis) / dayMillis)
        return (y - 1970) * 12 + (m - 1)
    }

    /// Start (ms) of month number `index` (see `monthIndex`).
    public static func start(ofMonth index: Int64) -> Int64 {
        let y = 1970 + (index >= 0 ? index / 12 : (index - 11) / 12)
        let m = index - (y - 1970) * 12 + 1
        return ISO8601.days(fromCivil: y, m, 1) * dayMillis
    }

    /// Start of the UTC month containing `t`.
    public static func monthStart(_ t: Int64) -> Int64 { start(ofMonth: monthIndex(t)) }

    /// Start of the UTC month after the one containing `t`.
    public static func nextMonthStart(_ t: Int64) -> Int64 { start(ofMonth: monthIndex(t) + 1) }

    /// Whole seconds from `now` until `end`, rounded up, at least 1 (for `Retry-After` and
    /// `RateLimit-Reset`, which must not tell a client to retry before the window has passed).
    public static func secondsUntil(_ end: Int64, from now: Int64) -> Int64 {
        let ms = end - now
        return ms <= 0 ? 1 : max(1, (ms + 999) / 1000)
    }
}
