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
/// Thread-safety: one mutex around the ring.
public final class CallRing: Sendable {
    public let capacity: Int
    private let state = Mutex<(entries: [CallRecord], start: Int)>(([], 0))

    public init(capacity: Int) { self.capacity = max(1, capacity) }

    /// Keys of the calls worth listing: Cloud Code entry points.
    public static func isCloudCall(_ target: String) -> Bool {
        target.hasPrefix("function:") || target.hasPrefix("job:") || target.hasPrefix("route:")
    }

    /// Every Cloud Code call appends from its own thread: the record it replaces is handed out of
    /// the lock and freed after it (freeing its strings under the lock made workers spin on it).
    public func append(_ r: CallRecord) {
        _ = state.withLock { s -> CallRecord? in
            if s.entries.count < capacity {
                s.entries.append(r)
                return nil
            }
            let old = s.entries[s.start]
            s.entries[s.start] = r
            s.start = (s.start + 1) % capacity
            return old
        }
    }

    /// Newest first; `target` filters by exact usage key, `failed` keeps errors only.
    public func recent(limit: Int, target: String? = nil, failed: Bool = false) -> [CallRecord] {
        state.withLock { s in
            var out: [CallRecord] = []
            let n = s.entries.count
            var i = n - 1
            while i >= 0 && out.count < limit {
                let r = s.entries[(s.start + i) % n]
                i -= 1
                if let target, r.target != target { continue }
                if failed && r.status < 400 { continue }
                out.append(r)
            }
            return out
        }
    }
}
