import MoonbaseCore
import Synchronization

/// Request accounting and limits: the hot-path half of MoonbaseQuota.
///
/// Per request the host calls, in order:
/// 1. `check(account:function:isMaster:)` before doing any work. An allowed decision has already
///    counted the request toward every limit (so concurrent requests cannot overshoot); send
///    `decision.headers` with the response. A refused one → answer `decision.error` (429 / 155
///    with `Retry-After` and the `RateLimit-*` headers) and `record` it with `refused: true`.
/// 2. `record(_:)` once the response is known, with the DB operations, Lua CPU, wall time and
///    bytes. If the request turned out to cost nothing (a retry answered 159), call
///    `refund(decision)` instead and do not record it.
///
/// Nothing here writes to disk: usage goes into lock-striped memory and a `UsageFlusher` writes
/// the deltas through a `UsageSink` at least every second and at shutdown. A crash therefore
/// loses at most the last flush interval (one second) of accounting; the limits then restart
/// from the last flushed totals, which can let through at most one second's worth of requests
/// more than the quota.
///
/// Several hosts on one database (`UsageSink.writeReadingShared` answers): each flush also reads
/// the totals every host flushed, and `absorbShared` adds the other hosts' requests to the
/// limit counters, so every host enforces the cluster's total (see `absorbShared` for the bound).
///
/// Accounts and windows: the monthly quota counts the app's units per UTC month; per-minute
/// limits use fixed windows aligned to the UTC minute (see `RateWindows`) keyed by the caller
/// (`user:ID`, else `ip:ADDR`), and a function's `rateLimit` by `function:NAME|<caller>`.
/// Master-key requests are counted toward the month but never refused, take no per-minute slot,
/// and get no `RateLimit-*` headers (no limit applies to them).
///
/// Concurrency: `Sendable`. `check` is one compare-and-swap on the month counter plus one
/// uncontended striped lock per per-minute limit; `record` takes one per-thread stripe lock. With
/// no limits configured `check` returns at once, and with accounting off `record` does too.
public final class Quota: Sendable {
    public let config: QuotaConfig
    let clock: any HostClock
    let usage: UsageAggregator
    let windows: RateWindows
    let month = MonthCounter()
    /// Many hosts: what the flusher learnt of the shared monthly total (see `absorbShared`).
    let shared = Mutex(SharedMonth())

    struct SharedMonth {
        var month: Int64 = .min
        /// This host's app units flushed in `month`.
        var flushed: Int64 = 0
        /// Other hosts' units already added to the month counter.
        var others: Int64 = 0
    }

    /// - Parameters:
    ///   - config: limits and accounting switch.
    ///   - clock: the only source of "now" (tests pass a `ManualClock`).
    public init(config: QuotaConfig = QuotaConfig(), clock: any HostClock = SystemClock()) {
        self.config = config
        self.clock = clock
        self.usage = UsageAggregator(stripes: config.stripes)
        self.windows = RateWindows(stripes: config.stripes)
    }

    /// `check` at the clock's current time.
    public func check(account: Account, function: FunctionLimit? = nil, isMaster: Bool) -> Decision {
        check(account: account, function: function, isMaster: isMaster, now: clock.nowMillis())
    }

    /// Decides whether a request may run, and counts it toward the limits when it may.
    ///
    /// - Parameters:
    ///   - account: the caller (`.user`, else `.ip`); `.app` for callers without either (per-minute
    ///     limits then do not apply).
    ///   - function: the function's own `rateLimit`, if it has one.
    ///   - isMaster: master-key requests are counted but never refused.
    ///   - now: ms since the epoch.
    public func check(account: Account, function: FunctionLimit?, isMaster: Bool, now: Int64) -> Decision {
        let monthly = config.monthlyRequests, perMinute = config.perMinute
        let functionLimit = function.map { max(0, $0.perMinute) } ?? 0
        let minute = UTCCalendar.minuteStart(now)
        if monthly <= 0 && perMinute <= 0 && functionLimit == 0 {
            return Decision(allowed: true, rateLimit: nil, retryAfterSeconds: nil, month: nil, minute: minute)
        }
        let monthIndex = UTCCalendar.monthIndex(now)
        if isMaster {
            let counted = monthly > 0 ? month.acquire(month: monthIndex, limit: monthly, force: true).month : nil
            return Decision(allowed: true, rateLimit: nil, retryAfterSeconds: nil,
                            month: counted, minute: minute)
        }

        let monthReset = UTCCalendar.secondsUntil(UTCCalendar.start(ofMonth: monthIndex + 1), from: now)
        let minuteReset = UTCCalendar.secondsUntil(minute + UTCCalendar.minuteMillis, from: now)
        let limitedCaller = perMinute > 0 && account != .app
        let callerKey = limitedCaller || functionLimit > 0 ? account.key : ""
        let functionKey = functionLimit > 0 ? function.map { $0.target.key + "|" + callerKey } : nil

        // The tightest limit so far: lowest remaining, then the longest reset.
        var tightest: RateLimitStatus?
        func consider(_ s: RateLimitStatus) {
            guard let t = tightest else { tightest = s; return }
            if s.remaining < t.remaining || (s.remaining == t.remaining && s.resetSeconds > t.resetSeconds) { tightest = s }
        }
        var takenMonth: Int64?
        var callerWindow: String?, functionWindow: String?
        var refused = false

        if monthly > 0 {
            let (taken, count, counted) = month.acquire(month: monthIndex, limit: monthly, force: false)
            if taken {
                takenMonth = counted
                consider(RateLimitStatus(scope: .monthly, limit: monthly, remaining: monthly - count, resetSeconds: monthReset))
            } else {
                refused = true
            }
        }
        if !refused && limitedCaller {
            let (taken, count) = windows.acquire(callerKey, limit: perMinute, minute: minute)
            if taken {
                callerWindow = callerKey
                consider(RateLimitStatus(scope: .perMinute, limit: perMinute, remaining: perMinute - count, resetSeconds: minuteReset))
            } else {
                refused = true
            }
        }
        if !refused, functionLimit > 0, let functionKey {
            let (taken, count) = windows.acquire(functionKey, limit: functionLimit, minute: minute)
            if taken {
                functionWindow = functionKey
                consider(RateLimitStatus(scope: .function, limit: functionLimit, remaining: functionLimit - count, resetSeconds: minuteReset))
            } else {
                refused = true
            }
        }

        if refused {
            if let takenMonth { month.release(month: takenMonth) }
            if let k = callerWindow { windows.release(k, minute: minute) }
            if let k = functionWindow { windows.release(k, minute: minute) }
            // Retry-After must outlast every exhausted limit, not only the first one found.
            var exhausted: [RateLimitStatus] = []
            if monthly > 0 && month.count(month: monthIndex) >= monthly {
                exhausted.append(RateLimitStatus(scope: .monthly, limit: monthly, remaining: 0, resetSeconds: monthReset))
            }
            if limitedCaller && windows.count(callerKey, minute: minute) >= perMinute {
                exhausted.append(RateLimitStatus(scope: .perMinute, limit: perMinute, remaining: 0, resetSeconds: minuteReset))
            }
            if functionLimit > 0, let functionKey, windows.count(functionKey, minute: minute) >= functionLimit {
                exhausted.append(RateLimitStatus(scope: .function, limit: functionLimit, remaining: 0, resetSeconds: minuteReset))
            }
            let worst = exhausted.max { $0.resetSeconds < $1.resetSeconds }
                ?? RateLimitStatus(scope: .perMinute, limit: max(perMinute, functionLimit), remaining: 0, resetSeconds: minuteReset)
            return Decision(allowed: false, rateLimit: worst, retryAfterSeconds: worst.resetSeconds,
                            month: nil, minute: minute)
        }
        return Decision(allowed: true, rateLimit: tightest, retryAfterSeconds: nil,
                        month: takenMonth, callerWindow: callerWindow, functionWindow: functionWindow, minute: minute)
    }

    /// Gives back what an allowed `decision` counted (for a request answered 159 as a retry, which
    /// costs nothing). Calling it for a refused decision does nothing.
    public func refund(_ decision: Decision) {
        guard decision.allowed else { return }
        if let m = decision.month { month.release(month: m) }
        if let k = decision.callerWindow { windows.release(k, minute: decision.minute) }
        if let k = decision.functionWindow { windows.release(k, minute: decision.minute) }
    }

    /// Adds one request's usage at the clock's current time (see `RequestUsage` for when to call).
    @inline(__always)
    public func record(_ usage: RequestUsage) {
        guard config.accountingEnabled else { return }
        self.usage.add(usage, hour: UTCCalendar.hourStart(clock.nowMillis()))
    }

    /// Counts one realtime event delivered to `account` (`bytes` sent): no unit is charged.
    public func recordEvent(account: Account, bytes: Int64) {
        guard config.accountingEnabled else { return }
        usage.add(UsageCounts(bytesOut: bytes, events: 1), account: account, hour: UTCCalendar.hourStart(clock.nowMillis()))
    }

    /// Adds one request's usage to the hour containing `now`.
    public func record(_ usage: RequestUsage, now: Int64) {
        guard config.accountingEnabled else { return }
        self.usage.add(usage, hour: UTCCalendar.hourStart(now))
    }

    /// Units counted toward the monthly quota in the month containing `now` (tracked only while a
    /// monthly limit is configured; the usage rows always have the full count).
    public func monthUnits(now: Int64) -> Int64 { month.count(month: UTCCalendar.monthIndex(now)) }

    /// Requests counted in the current minute window of `key` (`user:ID`, `ip:ADDR`,
    /// `function:NAME|user:ID`).
    public func windowCount(_ key: String, now: Int64) -> Int64 {
        windows.count(key, minute: UTCCalendar.minuteStart(now))
    }
}
