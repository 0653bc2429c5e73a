/// The rows of one statement, copied out of libpq's `PGresult`, and its affected-row count.
///
/// ```swift
/// let r = try conn.execute("SELECT id, n FROM t WHERE n > $1 ORDER BY id", [.integer(1)])
/// for row in r.rows { print(row["id"], row[1]) }
/// ```
public struct PGResult: Sendable {
    /// Column names, in order.
    public let columns: [String]
    public let rows: [PGRow]
    /// Rows inserted/updated/deleted (or selected) as the command tag reports; 0 for DDL.
    public let affectedRows: Int

    /// The first column of the first row, or nil when there is no row.
    public var scalar: PGValue? { rows.first?.values.first }
}

/// One result row: values by position, or by column name.
public struct PGRow: Sendable {
    public let columns: [String]
    public let values: [PGValue]

    public subscript(index: Int) -> PGValue { values[index] }

    /// The value of the first column named `name`, or `.null` when there is none.
    public subscript(name: String) -> PGValue {
        guard let i = columns.firstIndex(of: name) else { return .null }
        return values[i]
    }
}
