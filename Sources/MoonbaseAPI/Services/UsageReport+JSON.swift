import MoonbaseCore
import MoonbaseJSON
import MoonbaseQuota

extension UsageReport {
    /// The body of `GET /admin/usage` and `moonbase usage --json`.
    public var json: JSONValue {
        .object([
            "from": .string(ISO8601.format(millis: from)), "to": .string(ISO8601.format(millis: to)),
            "by": .string(by.rawValue),
            "rows": .array(rows.map { row in
                .object([
                    "key": .string(row.key), "units": .int(row.units), "refused": .int(row.refused),
                    "dbReads": .int(row.dbReads), "dbWrites": .int(row.dbWrites),
                    "luaCpuMs": .double(row.luaCpuMs), "wallMs": .double(row.wallMs),
                    "bytesIn": .int(row.bytesIn), "bytesOut": .int(row.bytesOut),
                    "events": .int(row.events),
                ])
            }),
        ])
    }
}
