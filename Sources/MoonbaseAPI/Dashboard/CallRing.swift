import MoonbaseCore
import MoonbaseJSON
import Synchronization

/// One finished Cloud Code call (function, job start or route) as the dashboard lists it.
public struct CallRecord: Sendable {
    public var time: Int64
    public var requestId: String
    /// The usage key: `function:NAME`, `job:NAME`, `route:METHOD /path`.
    public var target: String
    /// The account charged: `app` (master key), `user:ID` or `ip:ADDRESS`.
    public var caller: String
    public var status: Int
    public var wallMicros: Int64
    public var luaCpuMicros: Int64
    public var dbReads: Int64
    public var dbWrites: Int64
    /// The Parse error (`code`, `error`) of a failed call; a script error's text starts with file:line.
    public var errorCode: Int?
    public var error: String?

    var json: JSONValue {
        .object([
            "time": .string(ISO8601.format(millis: time)), "requestId": .string(requestId), "target": .string(target),
            "caller": .string(caller), "status": .int(Int64(status)), "ok": .bool(status < 400),
            "durationMs": .double(Double(wallMicros) / 1000), "luaCpuMs": .double(Double(luaCpuMicros) / 1000),
            "dbReads": .int(dbReads), "dbWrites": .int(dbWrites),
            "code": errorCode.map { .int(Int64($0)) } ?? .null, "error": error.map { .string($0) } ?? .null,
        ])
    }
}

/// The last calls of Cloud Code (newest last), bounded.
///
/// Thread-safety: every Cloud Code call appends from its own thread, so there is no lock around
/// the whole ring (workers spun on one: 10% of the server's CPU under a Lua benchmark on two
/// cores). A call takes the next sequence number atomically and writes its slot under that
/// slot's own lock (two writers meet there only when the ring wraps around under them); a reader
/// walks the slots back from the newest number and keeps the records whose slot still holds
/// that number.
public final class CallRing: Sendable {
    public let capacity: Int
    private let slots: [Slot]
    /// Records appended so far (the next one's sequence number).
    private let appended = Atomic<Int>(0)

    final class Slot: Sendable {
        let record = Mutex<(seq: Int, record: CallRecord?)>((-1, nil))
    }

    public init(capacity: Int) {
        self.capacity = max(1, capacity)
        slots = (0..<max(1, capacity)).map { _ in Slot() }
    }

    /// Keys of the calls worth listing: Cloud Code entry points.
    public static func isCloudCall(_ target: String) -> Bool {
        target.hasPrefix("function:") || target.hasPrefix("job:") || target.hasPrefix("route:")
    }

    public func append(_ r: CallRecord) {
        let seq = appended.add(1, ordering: .relaxed).oldValue
        // The record replaced is handed out of the lock and freed after it.
        _ = slots[seq % capacity].record.withLock { slot -> CallRecord? in
            guard slot.seq < seq else { return r }   // a later call already took this slot
            let old = slot.record
            slot = (seq, r)
            return old
        }
    }

    /// Newest first; `target` filters by exact usage key, `failed` keeps errors only.
    public func recent(limit: Int, target: String? = nil, failed: Bool = false) -> [CallRecord] {
        var out: [CallRecord] = []
        var seq = appended.load(ordering: .relaxed) - 1
        let oldest = seq - capacity
        while seq > oldest && seq >= 0 && out.count < limit {
            let want = seq
            seq -= 1
            // A slot still being written, or overwritten by a later call, holds no record of `want`.
            guard let r = slots[want % capacity].record.withLock({ $0.seq == want ? $0.record : nil }) else { continue }
            if let target, r.target != target { continue }
            if failed && r.status < 400 { continue }
            out.append(r)
        }
        return out
    }
}
