import Synchronization

/// One captured log line: host events and Cloud Code output (`print`, `log.*`).
public struct LogEntry: Sendable {
    /// Increasing from 1 for the life of the process: a client follows the log with `since=<seq>`.
    public var seq: Int64
    public var time: Int64
    public var level: LogLevel
    /// `lua` for Cloud Code output, `host` for the server's own events.
    public var source: String
    public var requestId: String?
    public var message: String
    /// Extra fields (`function`, `at` = file:line for Cloud Code lines).
    public var fields: [(String, String)]

    public func field(_ name: String) -> String? { fields.first { $0.0 == name }?.1 }
}

/// A bounded ring of the most recent log lines (the dashboard and `moonbase logs` read it).
///
/// Thread-safety: one mutex around the ring; appends are O(1) and never allocate beyond the
/// entry itself once the ring is full.
public final class LogRing: Sendable {
    public let capacity: Int
    private struct State {
        var entries: [LogEntry] = []
        var start = 0  // index of the oldest entry once the ring is full
        var nextSeq: Int64 = 1
    }
    private let state = Mutex(State())

    public init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    public func append(_ level: LogLevel, _ message: String, source: String, requestId: String?,
                       fields: [(String, String)], time: Int64) {
        state.withLock { s in
            let e = LogEntry(seq: s.nextSeq, time: time, level: level, source: source, requestId: requestId,
                             message: message, fields: fields)
            s.nextSeq += 1
            if s.entries.count < capacity {
                s.entries.append(e)
            } else {
                s.entries[s.start] = e
                s.start = (s.start + 1) % capacity
            }
        }
    }

    /// Lines after `since` (a sequence number; 0 = from the oldest kept), at `minLevel` or above,
    /// of one request when `requestId` is given; at most `limit`, the newest ones when more match.
    public func lines(since: Int64 = 0, sinceTime: Int64? = nil, minLevel: LogLevel = .debug,
                      requestId: String? = nil, limit: Int = 1000) -> (lines: [LogEntry], last: Int64) {
        state.withLock { s in
            var out: [LogEntry] = []
            let n = s.entries.count
            for i in 0..<n {
                let e = s.entries[(s.start + i) % n]
                guard e.seq > since, e.level >= minLevel else { continue }
                if let sinceTime, e.time < sinceTime { continue }
                if let requestId, e.requestId != requestId { continue }
                out.append(e)
            }
            if out.count > limit { out.removeFirst(out.count - limit) }
            return (out, s.nextSeq - 1)
        }
    }
}
