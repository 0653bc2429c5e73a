import Foundation
import MoonbaseCore
import Synchronization

@testable import MoonbaseQuota

/// 2026-11-29T20:23:45.678Z
let novemberEvening: Int64 = ISO8601.parse("2026-11-29T20:23:45.678Z")!

func ms(_ iso: String) -> Int64 { ISO8601.parse(iso)! }

/// Runs `body(i)` on `n` real threads at once (not a dispatch pool capped at the core count) and
/// waits for all of them.
func onThreads(_ n: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    let gate = DispatchSemaphore(value: 0)
    for i in 0..<n {
        group.enter()
        let t = Thread {
            gate.wait()
            body(i)
            group.leave()
        }
        t.start()
    }
    for _ in 0..<n { gate.signal() }
    group.wait()
}

/// A `UsageSink` in memory, with the semantics the SQL gives: rows add up, windows replace.
final class MemorySink: UsageSink {
    struct State {
        var rows: [UsageBucket: UsageCounts] = [:]
        var windows: [String: WindowCount] = [:]
        var writes = 0
        var failNext = 0
    }
    let state = Mutex(State())

    func write(_ batch: UsageBatch) throws {
        try state.withLock { s in
            if s.failNext > 0 {
                s.failNext -= 1
                throw SinkError.unavailable
            }
            s.writes += 1
            for r in batch.rows { s.rows[r.bucket, default: UsageCounts()].add(r.counts) }
            for w in batch.windows { s.windows[w.key] = w }
            s.windows = s.windows.filter { $0.value.minute >= batch.pruneWindowsBefore }
        }
    }

    func loadTotals(monthStart: Int64, monthEnd: Int64, minute: Int64) throws -> UsageSnapshot {
        state.withLock { s in
            let units = s.rows.filter { $0.key.kind == .account && $0.key.key == "app" && $0.key.hour >= monthStart && $0.key.hour < monthEnd }
                .reduce(Int64(0)) { $0 + $1.value.units }
            return UsageSnapshot(appMonthUnits: units, windows: s.windows.values.filter { $0.minute == minute })
        }
    }

    var rows: [UsageRow] { state.withLock { s in s.rows.map { UsageRow(bucket: $0.key, counts: $0.value) } } }
    var writes: Int { state.withLock { $0.writes } }

    func total(_ kind: UsageKind, _ key: String) -> UsageCounts {
        var t = UsageCounts()
        for r in rows where r.kind == kind && r.key == key { t.add(r.counts) }
        return t
    }
}

enum SinkError: Error { case unavailable }
