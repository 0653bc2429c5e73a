import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// The change-feed side of every write path, kept apart from the writes themselves: each
/// write calls one of these in its own transaction (set-based writes stay set-based: one
/// `INSERT … SELECT` whatever the number of rows).
extension WriteTransaction {
    /// What a save must finish after its statement ran.
    struct FeedSave {
        let className: String
        let count: Int
        let originals: [String: JSONObject]?
    }

    /// After an insert: the new row gets its seq.
    func feedInserted(_ className: String, objectId: String, rid: Int64) throws(ParseError) {
        let n = try ChangeFeed.recordInserted(self, className, objectId: objectId, rid: rid)
        try ChangeFeed.complete(self, className, count: n, originals: nil)
    }

    /// Before an update (one object or set-based): the rows `filter` selects get their seqs,
    /// and their current state is kept for the events when the class is observed.
    func feedBeforeSave(_ className: String, filter: String, binds: [SQLiteValue]) throws(ParseError) -> FeedSave {
        let originals = try ChangeFeed.originals(self, className, filter: filter, binds: binds)
        let n = try ChangeFeed.record(self, className, op: .save, filter: filter, binds: binds)
        return FeedSave(className: className, count: n, originals: originals)
    }

    /// After the update statement: the events get the objects as stored now.
    func feedAfterSave(_ f: FeedSave) throws(ParseError) {
        try ChangeFeed.complete(self, f.className, count: f.count, originals: f.originals)
    }

    /// Before a delete (one object or set-based): tombstones for the rows `filter` selects
    /// (SQL over the class table aliased `t`). Public for modules that delete with their own SQL
    /// (sessions): every committed delete must reach the change feed.
    public func feedBeforeDelete(_ className: String, filter: String, binds: [SQLiteValue]) throws(ParseError) {
        try ChangeFeed.record(self, className, op: .delete, filter: filter, binds: binds)
    }
}
