import Foundation

/// SplitMix64: a tiny seeded generator, so the differential cases are the same on every run.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// One differential case: an expression, a zone and a start instant.
struct CronCase {
    var expr: String
    var tz: String
    var start: Int64
}

/// Random standard cron expressions and start times, biased toward the interesting corners:
/// both day fields restricted, wrap-around and equal ranges, `A/S`, names, day-of-week 7,
/// out-of-range values (both sides must reject), and starts near daylight-saving transitions.
struct CronCaseGenerator {
    var rng: SplitMix64

    static let zones = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe",
                        "Europe/London", "Australia/Sydney", "Pacific/Chatham", "America/St_Johns",
                        "Asia/Kolkata", "America/Los_Angeles"]
    static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    static let days = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
    static let macros = ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"]

    init(seed: UInt64) { rng = SplitMix64(seed: seed) }

    mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &rng) }
    mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &rng) < p }

    /// A value of the field, sometimes as a name, rarely just out of range.
    mutating func value(_ lo: Int, _ hi: Int, names: [String]?, nameBase: Int) -> String {
        if chance(0.02) { return String(chance(0.5) ? hi + 1 : max(0, lo - 1)) }
        let v = int(lo...hi)
        if let names, chance(0.3) {
            let i = v - nameBase
            if i >= 0 && i < names.count { return chance(0.2) ? names[i].uppercased() : names[i] }
        }
        if names == Self.days && v == 0 && chance(0.3) { return "7" }
        return String(v)
    }

    mutating func element(_ lo: Int, _ hi: Int, names: [String]?, nameBase: Int, dense: Bool) -> String {
        switch int(0...9) {
        case 0, 1, 2:
            return value(lo, hi, names: names, nameBase: nameBase)
        case 3, 4:
            let a = value(lo, hi, names: names, nameBase: nameBase)
            let b = value(lo, hi, names: names, nameBase: nameBase)
            return chance(0.4) ? "\(a)-\(b)/\(int(1...(dense ? 4 : 20)))" : "\(a)-\(b)"
        case 5, 6:
            return "*/\(int(1...(dense ? 3 : max(2, (hi - lo) / 2))))"
        case 7:
            return "\(value(lo, hi, names: names, nameBase: nameBase))/\(int(1...max(2, (hi - lo) / 3)))"
        case 8:
            let a = value(lo, hi, names: names, nameBase: nameBase)
            return "\(a)-\(a)"
        default:
            return chance(0.01) ? "*/0" : String(int(lo...hi))
        }
    }

    mutating func field(_ lo: Int, _ hi: Int, names: [String]? = nil, nameBase: Int = 0, starBias: Double) -> String {
        if chance(starBias) { return "*" }
        let n = chance(0.25) ? int(2...3) : 1
        var parts: [String] = []
        for _ in 0..<n { parts.append(element(lo, hi, names: names, nameBase: nameBase, dense: lo == 0 && hi == 23)) }
        return parts.joined(separator: ",")
    }

    mutating func expression() -> String {
        if chance(0.03) { return Self.macros[int(0...Self.macros.count - 1)] }
        let minute = field(0, 59, starBias: 0.15)
        let hour = field(0, 23, starBias: 0.35)
        let dom = field(1, 31, starBias: 0.5)
        let month = field(1, 12, names: Self.months, nameBase: 1, starBias: 0.6)
        let dow = field(0, 6, names: Self.days, nameBase: 0, starBias: 0.5)
        return [minute, hour, dom, month, dow].joined(separator: " ")
    }

    /// A start instant: uniform over 2000–2040, or within a few hours of a DST transition.
    mutating func start(in tz: String) -> Int64 {
        let uniform = Int64.random(in: 946_684_800_000...2_208_988_800_000, using: &rng)
        guard chance(0.55), let zone = TimeZone(identifier: tz),
              let transition = zone.nextDaylightSavingTimeTransition(after: Date(timeIntervalSince1970: Double(uniform) / 1000))
        else { return uniform }
        let t = Int64(transition.timeIntervalSince1970) * 1000
        let jitter = Int64(int(-3 * 3600...3 * 3600)) * 1000
        // Mostly whole minutes (where croniter's arithmetic is most delicate), sometimes not.
        return chance(0.7) ? (t + jitter) / 60_000 * 60_000 : t + jitter + Int64(int(0...999))
    }

    mutating func cases(_ n: Int) -> [CronCase] {
        var out: [CronCase] = []
        for _ in 0..<n {
            let tz = Self.zones[int(0...Self.zones.count - 1)]
            out.append(CronCase(expr: expression(), tz: tz, start: start(in: tz)))
        }
        return out
    }
}
