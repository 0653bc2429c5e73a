/// A value bound to, or read from, SQLite: its five storage classes (GRDB's `DatabaseValue.Storage`).
public enum SQLiteValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
}
