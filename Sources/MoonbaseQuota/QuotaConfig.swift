/// Quota and accounting settings, from the environment or `serve` flags.
public struct QuotaConfig: Sendable, Equatable {
    /// `MOONBASE_ACCOUNTING` (`on` by default; `off` to measure its cost). Off: no usage rows are
    /// kept or flushed (`record` returns at once). Configured limits are still enforced, in memory
    /// only, so they do not survive a restart while accounting is off.
    public var accountingEnabled: Bool = true
    /// `MOONBASE_QUOTA_MONTHLY_REQUESTS`: units per UTC month for the app; 0 = unlimited.
    public var monthlyRequests: Int64 = 0
    /// `MOONBASE_RATE_LIMIT_PER_MINUTE`: requests per minute per user, else per IP; 0 = unlimited.
    public var perMinute: Int64 = 0
    /// How often the flusher writes (at least every second).
    public var flushIntervalMillis: Int = 1000
    /// Lock stripes for the in-memory counters (rounded up to a power of two); at least the number
    /// of request threads keeps the hot path free of lock contention.
    public var stripes: Int = 32

    public init(accountingEnabled: Bool = true, monthlyRequests: Int64 = 0, perMinute: Int64 = 0,
                flushIntervalMillis: Int = 1000, stripes: Int = 32) {
        self.accountingEnabled = accountingEnabled
        self.monthlyRequests = monthlyRequests
        self.perMinute = perMinute
        self.flushIntervalMillis = flushIntervalMillis
        self.stripes = stripes
    }

    /// Reads `MOONBASE_ACCOUNTING`, `MOONBASE_QUOTA_MONTHLY_REQUESTS` and
    /// `MOONBASE_RATE_LIMIT_PER_MINUTE`; unset or empty variables keep the defaults.
    /// - Throws: `QuotaConfigError` naming the variable when a value is not understood.
    public init(environment env: [String: String]) throws(QuotaConfigError) {
        self.init()
        if let v = env["MOONBASE_ACCOUNTING"], !v.isEmpty {
            switch v.lowercased() {
            case "on", "1", "true", "yes": accountingEnabled = true
            case "off", "0", "false", "no": accountingEnabled = false
            default: throw QuotaConfigError(variable: "MOONBASE_ACCOUNTING", value: v, expected: "on or off")
            }
        }
        monthlyRequests = try Self.count(env, "MOONBASE_QUOTA_MONTHLY_REQUESTS") ?? 0
        perMinute = try Self.count(env, "MOONBASE_RATE_LIMIT_PER_MINUTE") ?? 0
    }

    /// Parses a non-negative integer setting (also used for the `serve` flags).
    public static func parseCount(_ text: String, name: String) throws(QuotaConfigError) -> Int64 {
        guard let n = Int64(text.trimmingSpaces), n >= 0 else {
            throw QuotaConfigError(variable: name, value: text, expected: "a whole number ≥ 0 (0 = unlimited)")
        }
        return n
    }

    private static func count(_ env: [String: String], _ name: String) throws(QuotaConfigError) -> Int64? {
        guard let v = env[name], !v.isEmpty else { return nil }
        return try parseCount(v, name: name)
    }
}

/// A quota setting that could not be read.
public struct QuotaConfigError: Error, Sendable, CustomStringConvertible {
    public var variable: String
    public var value: String
    public var expected: String

    public var description: String { "\(variable)=\(value): expected \(expected)" }
}

extension String {
    /// The string without leading and trailing spaces and tabs (no Foundation).
    var trimmingSpaces: Substring {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = firstIndex(where: { !isSpace($0) }),
              let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return self[first...last]
    }
}
