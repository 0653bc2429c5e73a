import MoonbaseCore

/// One change feed row: a save (with the object as stored now) or a delete tombstone.
public struct ChangeFeedRow: Sendable {
    public var seq: Int64
    public var op: ChangeEvent.Op
    public var objectId: String
    /// The stored object (saves).
    public var object: StoredObject?
    /// The deleted object's read permissions (`|id|id|`; tombstones; nil = it was public).
    public var perm: String?

    public init(seq: Int64, op: ChangeEvent.Op, objectId: String, object: StoredObject?, perm: String?) {
        self.seq = seq
        self.op = op
        self.objectId = objectId
        self.object = object
        self.perm = perm
    }
}

/// The change feed as realtime reads it: every committed write gets a sequence number; the
/// store tells one listener (the realtime engine) after each commit, and keeps the rows for
/// replay (`since`) until compaction and the tombstone purge remove them.
public protocol ChangeFeedStore: Sendable {
    /// Installs (or removes, with nil) who hears committed changes.
    func setChangeListener(_ listener: (any ChangeListener)?)
    /// The highest sequence number written so far (0 when none).
    func changeFeedHead() throws(ParseError) -> Int64
    /// Throws 160 when `since` (above 0) is older than the purge horizon.
    func checkChangeFeed(since: Int64) throws(ParseError)
    /// Rows of `className` with `after < seq <= through`, in order, at most `limit`, each object
    /// once (a row superseded by a later one of the same object is skipped).
    func changeFeed(_ className: String, after: Int64, through: Int64, limit: Int) throws(ParseError) -> [ChangeFeedRow]
    /// Removes rows superseded by later rows of the same object, for at most `batch` rows
    /// written since the last pass (one short transaction; call until it returns 0).
    /// - Returns: the number of rows examined.
    @discardableResult
    func compactChangeFeed(batch: Int) throws(ParseError) -> Int
    /// Deletes tombstones written before `cutoff` (ms) and advances the horizon.
    /// - Returns: the number of tombstones purged.
    @discardableResult
    func purgeChangeFeed(before cutoff: Int64) throws(ParseError) -> Int
}
