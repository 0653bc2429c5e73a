import MoonbaseCore
import MoonbaseQuota

/// Usage accounting's durable half: the quota's `UsageSink` (flushed batches, the totals loaded
/// at start) plus the reports of `GET /admin/usage` and `moonbase usage`.
public protocol UsageStore: UsageSink {
    /// The report of [from, to) (ms, hour-aligned: `UsageReport.range`), grouped by `by`
    /// (rows ordered as `UsageReport.aggregate` orders them). `series` (time groupings only):
    /// one account's or one function's rows instead of the app's totals.
    func usageReport(from: Int64, to: Int64, by: UsageGrouping,
                     series: (kind: UsageKind, key: String)?) throws(ParseError) -> UsageReport
}

extension UsageStore {
    public func usageReport(from: Int64, to: Int64, by: UsageGrouping) throws(ParseError) -> UsageReport {
        try usageReport(from: from, to: to, by: by, series: nil)
    }
}
