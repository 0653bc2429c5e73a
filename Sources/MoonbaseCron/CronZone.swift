import Foundation
import MoonbaseCore

/// The two questions schedule maths asks of a time zone, answered from Foundation's `TimeZone`
/// (the only Foundation use in the module): the UTC offset at an instant, and which instants
/// show a given wall-clock time (none in a spring-forward gap, two in a fall-back overlap).
///
/// A value type holding an immutable `TimeZone`; safe to share between threads.
struct CronZone: Sendable {
    let timeZone: TimeZone
    /// UTC or another zone without transitions: offsets are a constant and nothing is ambiguous.
    private let fixedOffset: Int64?

    init(_ timeZone: TimeZone) {
        self.timeZone = timeZone
        if timeZone.identifier == "UTC" || timeZone.identifier == "GMT" {
            fixedOffset = Int64(timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: 0)))
        } else {
            fixedOffset = nil
        }
    }

    /// Offset from UTC in seconds at the instant `t` (seconds since the epoch).
    func offset(at t: Int64) -> Int64 {
        if let fixedOffset { return fixedOffset }
        return Int64(timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(t))))
    }

    /// Wall-clock seconds (local time counted as if it were UTC) at the instant `t`.
    func wall(at t: Int64) -> Int64 { t + offset(at: t) }

    /// The instants whose wall-clock time is `w`, ascending: empty in a gap, two in an overlap.
    ///
    /// Looks at the offsets a day either side, so it assumes no two transitions lie within a
    /// day of each other (true of every zone in current tzdata).
    func instants(forWall w: Int64) -> [Int64] {
        if let fixedOffset { return [w - fixedOffset] }
        let before = offset(at: w - 86_400)
        let after = offset(at: w + 86_400)
        var out: [Int64] = []
        for o in before == after ? [before] : [before, after] {
            let t = w - o
            if offset(at: t) == o && !out.contains(t) { out.append(t) }
        }
        if out.isEmpty && before == after {
            // A transition inside the window that returns to the same offset (rare); scan hourly.
            var seen = Set<Int64>()
            for h in stride(from: -26, through: 26, by: 1) {
                let o = offset(at: w + Int64(h) * 3600)
                if seen.insert(o).inserted, offset(at: w - o) == o { out.append(w - o) }
            }
        }
        return out.sorted()
    }
}

/// Wall-clock arithmetic on "local seconds" (a local date and time counted as if it were UTC),
/// the Swift side of croniter's naive `datetime` plus `relativedelta`.
enum Civil {
    struct Parts {
        var year: Int64, month: Int64, day: Int64, hour: Int64, minute: Int64, second: Int64
        /// 0 = Sunday … 6 = Saturday (croniter's `isoweekday() % 7`).
        var weekday: Int64
    }

    static func parts(_ s: Int64) -> Parts {
        let days = floorDiv(s, 86_400)
        let rem = s - days * 86_400
        let (y, m, d) = ISO8601.civil(fromDays: days)
        let wd = ((days + 4) % 7 + 7) % 7
        return Parts(year: y, month: m, day: d, hour: rem / 3600, minute: rem % 3600 / 60, second: rem % 60, weekday: wd)
    }

    static func make(_ y: Int64, _ m: Int64, _ d: Int64, _ h: Int64 = 0, _ mi: Int64 = 0, _ s: Int64 = 0) -> Int64 {
        ISO8601.days(fromCivil: y, m, d) * 86_400 + h * 3600 + mi * 60 + s
    }

    static func lastDay(_ y: Int64, _ m: Int64) -> Int64 {
        switch m {
        case 2: return (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }
}
