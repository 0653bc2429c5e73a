/// The cost vector summed per account or function per hour.
///
/// Times are kept in microseconds so sums stay exact integers; reports convert to milliseconds.
public struct UsageCounts: Hashable, Sendable {
    /// Charged requests (1 per request, whatever it did).
    public var units: Int64 = 0
    /// Requests refused with 429 (they cost no unit).
    public var refused: Int64 = 0
    public var dbReads: Int64 = 0
    public var dbWrites: Int64 = 0
    public var luaCpuMicros: Int64 = 0
    public var wallMicros: Int64 = 0
    public var bytesIn: Int64 = 0
    public var bytesOut: Int64 = 0
    /// Realtime events delivered (they cost no unit).
    public var events: Int64 = 0

    public init(units: Int64 = 0, refused: Int64 = 0, dbReads: Int64 = 0, dbWrites: Int64 = 0,
                luaCpuMicros: Int64 = 0, wallMicros: Int64 = 0, bytesIn: Int64 = 0, bytesOut: Int64 = 0,
                events: Int64 = 0) {
        self.events = events
        self.units = units
        self.refused = refused
        self.dbReads = dbReads
        self.dbWrites = dbWrites
        self.luaCpuMicros = luaCpuMicros
        self.wallMicros = wallMicros
        self.bytesIn = bytesIn
        self.bytesOut = bytesOut
    }

    /// Adds `other` field by field.
    @inline(__always)
    public mutating func add(_ other: UsageCounts) {
        units &+= other.units
        refused &+= other.refused
        dbReads &+= other.dbReads
        dbWrites &+= other.dbWrites
        luaCpuMicros &+= other.luaCpuMicros
        wallMicros &+= other.wallMicros
        bytesIn &+= other.bytesIn
        bytesOut &+= other.bytesOut
        events &+= other.events
    }

    public var isZero: Bool { self == UsageCounts() }
}

/// One request's usage, handed to `Quota.record` once the response is known.
///
/// Call `record` exactly once for every request that was charged (`refused == false`: it costs
/// one unit) or refused with 429 (`refused == true`: counted as refused, no unit). Requests that
/// cost nothing (`/parse/health`, `/metrics`, retries answered 159) are not recorded at all.
public struct RequestUsage: Sendable {
    /// The caller account (`user:` or `ip:`), or nil to charge only the app (e.g. cron runs).
    public var account: Account?
    /// What the request hit, or nil when nothing fits.
    public var target: UsageTarget?
    /// True for a request refused with 429.
    public var refused: Bool
    public var dbReads: Int64
    public var dbWrites: Int64
    public var luaCpuMicros: Int64
    public var wallMicros: Int64
    public var bytesIn: Int64
    public var bytesOut: Int64

    public init(account: Account?, target: UsageTarget?, refused: Bool = false,
                dbReads: Int64 = 0, dbWrites: Int64 = 0, luaCpuMicros: Int64 = 0, wallMicros: Int64 = 0,
                bytesIn: Int64 = 0, bytesOut: Int64 = 0) {
        self.account = account
        self.target = target
        self.refused = refused
        self.dbReads = dbReads
        self.dbWrites = dbWrites
        self.luaCpuMicros = luaCpuMicros
        self.wallMicros = wallMicros
        self.bytesIn = bytesIn
        self.bytesOut = bytesOut
    }

    /// The counts this request adds to each row it touches.
    public var counts: UsageCounts {
        UsageCounts(units: refused ? 0 : 1, refused: refused ? 1 : 0, dbReads: dbReads, dbWrites: dbWrites,
                    luaCpuMicros: luaCpuMicros, wallMicros: wallMicros, bytesIn: bytesIn, bytesOut: bytesOut)
    }
}

/// Which kind of usage row: per account, or per function/route/class.
public enum UsageKind: String, Hashable, Sendable, CaseIterable {
    case account
    case function
}

/// The aggregation key of one usage row: kind, key, and the UTC hour (ms since the epoch of the
/// hour's start).
public struct UsageBucket: Hashable, Sendable {
    public var kind: UsageKind
    public var key: String
    public var hour: Int64

    public init(kind: UsageKind, key: String, hour: Int64) {
        self.kind = kind
        self.key = key
        self.hour = hour
    }
}
