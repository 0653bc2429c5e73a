import MoonbaseCore

/// `moonbase backup`: a consistent copy of the whole database while it is in use.
public protocol BackupStore: Sendable {
    /// Writes a copy of the database to `path` (replacing a file there).
    func backup(to path: String) throws(ParseError)
}
