import MoonbaseCore
import MoonbaseJSON
import Synchronization

/// One committed write as the change feed numbers it: the object's class and id, the
/// database-wide sequence number of the write, and, when a listener observed the class at
/// write time, the object before and after (master view: every field plus `ACL`).
///
/// Sequence numbers are strictly increasing in commit order; a transaction's writes get
/// consecutive numbers in the order they were made. Writes to a class no listener observed are
/// summarised as one mark per class and run of writes: an event with an empty `objectId`,
/// covering the seqs `firstSeq...seq` (`isMark`).
public struct ChangeEvent: Sendable {
    public enum Op: String, Sendable { case save, delete }
    public var seq: Int64
    public var className: String
    public var objectId: String
    public var op: Op
    /// The object before the write (nil for a create, or when the class was not observed).
    public var original: JSONObject?
    /// The object after the write (nil for a delete, or when the class was not observed).
    public var current: JSONObject?
    /// Whether `original`/`current` were captured (false: only `seq` and the ids are known).
    public var hasPayload: Bool
    /// For a mark: the first seq it covers (else equal to `seq`).
    public var firstSeq: Int64
    /// A summary of unobserved writes to `className` (`firstSeq...seq`), not one object's write.
    public var isMark: Bool { objectId.isEmpty }

    public init(seq: Int64, className: String, objectId: String, op: Op, original: JSONObject?,
                current: JSONObject?, hasPayload: Bool = true) {
        self.seq = seq
        self.className = className
        self.objectId = objectId
        self.op = op
        self.original = original
        self.current = current
        self.hasPayload = hasPayload
        self.firstSeq = seq
    }
}

extension ChangeEvent {
    /// Appends an unobserved write of `className` at `seq` as a mark, extending the last mark
    /// when it is the same class's write just before (consecutive unobserved writes: one range).
    public static func appendMark(_ events: inout [ChangeEvent], className: String, seq: Int64, op: Op) {
        if let last = events.last, last.isMark, last.className == className, last.seq == seq - 1 {
            events[events.count - 1].seq = seq
        } else {
            events.append(ChangeEvent(seq: seq, className: className, objectId: "", op: op, original: nil,
                                      current: nil, hasPayload: false))
        }
    }
}

/// Receives committed changes from the store (the realtime engine implements it).
///
/// `publish` runs after the outermost transaction committed, while the writer is still held:
/// it must only enqueue (never block, never run Lua, never write).
public protocol ChangeListener: AnyObject, Sendable {
    /// Whether writes to `className` should capture the objects before and after (someone is
    /// subscribed to it). Called inside the write: must be cheap.
    func observes(_ className: String) -> Bool
    /// The changes of one committed transaction, in seq order.
    func publish(_ events: [ChangeEvent])
}

/// The store's slot for its listener (installed once the realtime engine exists).
public final class ChangeListenerSlot: Sendable {
    private let slot = Mutex<(any ChangeListener)?>(nil)
    public init() {}
    public func set(_ l: (any ChangeListener)?) { slot.withLock { $0 = l } }
    public var listener: (any ChangeListener)? { slot.withLock { $0 } }
}
