import MoonbaseCore

/// Which limit a `RateLimitStatus` or a refusal describes.
public enum LimitScope: String, Sendable, Hashable {
    /// `MOONBASE_QUOTA_MONTHLY_REQUESTS`, for the app, per UTC month.
    case monthly
    /// `MOONBASE_RATE_LIMIT_PER_MINUTE`, per caller (user, else IP).
    case perMinute
    /// A function's `rateLimit = {perMinute = N}`, per caller.
    case function
}

/// The values of the `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` headers.
public struct RateLimitStatus: Sendable, Hashable {
    public var scope: LimitScope
    public var limit: Int64
    /// Requests left in the window after this one (0 when refused).
    public var remaining: Int64
    /// Seconds until the window resets.
    public var resetSeconds: Int64

    public init(scope: LimitScope, limit: Int64, remaining: Int64, resetSeconds: Int64) {
        self.scope = scope
        self.limit = limit
        self.remaining = remaining
        self.resetSeconds = resetSeconds
    }
}

/// A per-function limit to check along with the global ones.
public struct FunctionLimit: Sendable, Hashable {
    /// The function's usage target (`function:NAME`, or `route:…` if routes get limits).
    public var target: UsageTarget
    public var perMinute: Int64

    public init(target: UsageTarget, perMinute: Int64) {
        self.target = target
        self.perMinute = perMinute
    }

    public static func function(_ name: String, perMinute: Int64) -> FunctionLimit {
        FunctionLimit(target: .function(name), perMinute: perMinute)
    }
}

/// The answer of `Quota.check`: allowed (the unit is already counted toward the limits) or
/// refused, with the headers to send either way.
public struct Decision: Sendable {
    /// True when the request may run.
    public let allowed: Bool
    /// The tightest limit that applies (lowest remaining), or nil when none applies (no limits
    /// configured, or a master-key request). When refused: the refusing limit.
    public let rateLimit: RateLimitStatus?
    /// Seconds to send in `Retry-After` when refused.
    public let retryAfterSeconds: Int64?

    /// What was counted, for `Quota.refund`.
    let month: Int64?
    let callerWindow: String?
    let functionWindow: String?
    let minute: Int64

    init(allowed: Bool, rateLimit: RateLimitStatus?, retryAfterSeconds: Int64?,
         month: Int64?, callerWindow: String? = nil, functionWindow: String? = nil, minute: Int64) {
        self.allowed = allowed
        self.rateLimit = rateLimit
        self.retryAfterSeconds = retryAfterSeconds
        self.month = month
        self.callerWindow = callerWindow
        self.functionWindow = functionWindow
        self.minute = minute
    }

    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (when a limit applies) and
    /// `Retry-After` (when refused), in that order.
    public var headers: [(String, String)] {
        var h: [(String, String)] = []
        if let r = rateLimit {
            h.append(("RateLimit-Limit", String(r.limit)))
            h.append(("RateLimit-Remaining", String(r.remaining)))
            h.append(("RateLimit-Reset", String(r.resetSeconds)))
        }
        if let s = retryAfterSeconds { h.append(("Retry-After", String(s))) }
        return h
    }

    /// The 429 / 155 error to answer with when refused (carrying `headers`), else nil.
    public var error: ParseError? {
        guard !allowed else { return nil }
        let message: String
        switch rateLimit?.scope {
        case .monthly?: message = "monthly request quota exceeded (\(rateLimit?.limit ?? 0) requests per month)"
        case .perMinute?: message = "rate limit exceeded (\(rateLimit?.limit ?? 0) requests per minute)"
        case .function?: message = "function rate limit exceeded (\(rateLimit?.limit ?? 0) requests per minute)"
        case nil: message = "request limit exceeded"
        }
        return ParseError(.requestLimitExceeded, message, headers: headers)
    }
}
