import Foundation

extension CronExpression {
    /// The first time after `millis` (strictly later, at a whole minute) that the schedule names,
    /// in milliseconds since the epoch; nil for `@reboot` and for schedules with no such time
    /// within 50 years (`0 0 31 2 *`).
    ///
    /// Pure: reads no clock. Mirrors croniter 7.0.0's `get_next` in its default mode, including
    /// its daylight-saving handling (see the type's documentation).
    ///
    /// - Parameters:
    ///   - millis: the instant to start after (ms since the epoch).
    ///   - timeZone: the zone whose wall clock the fields describe (`CRON_TZ`; UTC by default).
    public func nextDate(after millis: Int64, in timeZone: TimeZone) -> Int64? {
        if isReboot { return nil }
        let search = Search(zone: CronZone(timeZone), minute: minute.isStar ? nil : minute.values,
                            hour: hour.isStar ? nil : hour.values, month: month.isStar ? nil : month.values,
                            dayOfMonth: dayOfMonth.isStar ? nil : dayOfMonth.values,
                            dayOfWeek: dayOfWeek.isStar ? nil : dayOfWeek.values)
        let now = Civil.floorDiv(millis, 1000)
        guard daysAreOred else { return search.next(after: now).map { $0 * 1000 } }
        // croniter's day_or: the earlier of "day-of-month only" and "day-of-week only". The two
        // candidates are compared by wall-clock time (Python compares aware datetimes that share
        // a tzinfo by their naive fields), the second one winning a tie.
        var byDay = search
        byDay.dayOfWeek = nil
        var byWeekday = search
        byWeekday.dayOfMonth = nil
        let t1 = byDay.next(after: now)
        let t2 = byWeekday.next(after: now)
        guard let t1 else { return t2.map { $0 * 1000 } }
        guard let t2 else { return t1 * 1000 }
        return (search.zone.wall(at: t1) < search.zone.wall(at: t2) ? t1 : t2) * 1000
    }

    /// The next `count` times after `millis`, each found from the one before (what `moonbase jobs`
    /// lists). Shorter when the schedule runs out.
    public func nextDates(after millis: Int64, count: Int, in timeZone: TimeZone) -> [Int64] {
        var out: [Int64] = []
        var t = millis
        while out.count < count, let n = nextDate(after: t, in: timeZone) {
            out.append(n)
            t = n
        }
        return out
    }
}

/// croniter's `_calc`: a field-by-field search on the wall clock, then the time-zone fix-ups.
/// A nil field is unrestricted. Times are whole seconds (instants, or wall-clock "local seconds").
private struct Search {
    let zone: CronZone
    var minute: [Int]?
    var hour: [Int]?
    var month: [Int]?
    var dayOfMonth: [Int]?
    var dayOfWeek: [Int]?

    /// How far croniter searches before giving up (`max_years_between_matches`).
    static let maxYears: Int64 = 50

    /// The next matching wall-clock minute after the minute holding `wall` (croniter's `_calc`
    /// on a naive datetime).
    func nextWall(after wall: Int64) -> Int64? {
        var t = Civil.floorDiv(wall + 60, 60) * 60
        let startYear = Civil.parts(t).year
        while true {
            let p = Civil.parts(t)
            if abs(p.year - startYear) > Self.maxYears { return nil }
            if let month, let diff = Self.diff(p.month, month, 12), diff != 0 {
                var y = p.year, m = p.month + diff
                while m > 12 { m -= 12; y += 1 }
                t = Civil.make(y, m, 1)
                continue
            }
            if let dayOfMonth, let diff = Self.diff(p.day, dayOfMonth, Civil.lastDay(p.year, p.month)), diff != 0 {
                t = Civil.make(p.year, p.month, p.day) + diff * 86_400
                continue
            }
            if let dayOfWeek, let diff = Self.diff(p.weekday, dayOfWeek, 7), diff != 0 {
                t = Civil.make(p.year, p.month, p.day) + diff * 86_400
                continue
            }
            if let hour, let diff = Self.diff(p.hour, hour, 24), diff != 0 {
                t = Civil.make(p.year, p.month, p.day, p.hour) + diff * 3600
                continue
            }
            if let minute, let diff = Self.diff(p.minute, minute, 60), diff != 0 {
                t = Civil.make(p.year, p.month, p.day, p.hour, p.minute) + diff * 60
                continue
            }
            return t
        }
    }

    /// croniter's `_get_next_nearest_diff`: distance to the next listed value at or after `x`,
    /// or the wrap into the next cycle (values above `range` skipped, as in short months).
    static func diff(_ x: Int64, _ values: [Int], _ range: Int64) -> Int64? {
        for v in values {
            let d = Int64(v)
            if d > range { continue }
            if d >= x { return d - x }
        }
        guard let first = values.first else { return nil }
        return Int64(first) - x + range
    }

    /// The next instant after `now` (croniter's `_calc` on an aware datetime).
    func next(after now: Int64) -> Int64? {
        let nowOffset = zone.offset(at: now)
        let nowWall = now + nowOffset
        guard var wall = nextWall(after: nowWall) else { return nil }
        var (aware, exists) = localize(wall, after: now)
        if !exists && (aware <= now || hour == nil) {
            // The wall time fell in a gap: with `*` hours (or when the shifted time is not
            // later than now) look for the next wall time that exists instead.
            while !exists {
                guard let w = nextWall(after: wall) else { return nil }
                wall = w
                (aware, exists) = localize(wall, after: now)
            }
        }
        let delta = zone.offset(at: aware) - nowOffset
        if delta == 0 { return aware }
        // The offset changed between now and the candidate: also try the schedule on the other
        // offset's wall clock and take whichever comes first (croniter's "alternative").
        guard let altWall = nextWall(after: nowWall + delta) else { return nil }
        let (alt, altExists) = localize(altWall, after: now)
        if !altExists || alt <= now { return aware }
        return aware > alt ? alt : aware
    }

    /// croniter's `_add_tzinfo` (forward): the instant for a wall time, and whether it exists.
    /// A time in a gap moves to the first existing minute after it (`exists` false); in an
    /// overlap the earlier instant is taken unless it is not after `now`.
    func localize(_ wall: Int64, after now: Int64) -> (Int64, Bool) {
        let candidates = zone.instants(forWall: wall)
        guard let first = candidates.first else {
            var w = wall
            var found: [Int64] = []
            while found.isEmpty {
                w += 60
                found = zone.instants(forWall: w)
            }
            return (found[0], false)
        }
        if candidates.count > 1 && first <= now { return (candidates[1], true) }
        return (first, true)
    }
}
