import MoonbaseCore
import MoonbaseSQLite

/// The change feed over `_mb_changes` (`ChangeFeed` holds the SQL).
extension SQLiteDocumentStore: ChangeFeedStore {
    public func setChangeListener(_ listener: (any ChangeListener)?) { context.changes.set(listener) }

    public func changeFeedHead() throws(ParseError) -> Int64 {
        try database.read { (c) throws(ParseError) in try ChangeFeed.head(c) }
    }

    public func checkChangeFeed(since: Int64) throws(ParseError) {
        try database.read { (c) throws(ParseError) in try ChangeFeed.checkSince(c, since) }
    }

    public func changeFeed(_ className: String, after: Int64, through: Int64 = .max, limit: Int) throws(ParseError) -> [ChangeFeedRow] {
        try database.read { (c) throws(ParseError) in
            try ChangeFeed.read(c, className: className, after: after, through: through, limit: limit)
        }
    }

    @discardableResult
    public func compactChangeFeed(batch: Int = 10_000) throws(ParseError) -> Int { try ChangeFeed.compact(database, batch: batch) }

    @discardableResult
    public func purgeChangeFeed(before cutoff: Int64) throws(ParseError) -> Int { try ChangeFeed.purge(database, before: cutoff) }
}
