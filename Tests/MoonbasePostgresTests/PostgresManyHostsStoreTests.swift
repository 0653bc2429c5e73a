import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import MoonbaseQuota
import MoonbaseStore
import Synchronization
import Testing

/// What hosts sharing one database coordinate through the store: failed logins counted by
/// every host, the per-job lock of cron claims, and the shared monthly total a flush reads.
/// Each test opens two stores ("hosts") on one fresh database.
extension PostgresSuite {
    @Suite struct PostgresManyHostsStoreTests {
        static func twoHosts() throws -> (PostgresStore, PostgresStore) {
            let url = try freshDatabaseURL()
            return (try PostgresStore(url: url), try PostgresStore(url: url))
        }

        @Test func failedLoginsCountedOnBothHostsAddUp() throws {
            let (a, b) = try Self.twoHosts()
            let now: Int64 = 1_800_000_000_000, window: Int64 = 900_000
            for _ in 0..<3 { _ = try a.recordLoginFailure(keys: ["ip:1.2.3.4", "user:u1"], now: now, windowMillis: window) }
            let after = try b.recordLoginFailure(keys: ["user:u1", "ip:1.2.3.4"], now: now + 10, windowMillis: window)
            #expect(after == [LoginFailureWindow(key: "ip:1.2.3.4", start: now, failures: 4),
                              LoginFailureWindow(key: "user:u1", start: now, failures: 4)])
            #expect(try a.loginFailures(keys: ["user:u1", "name:x"], now: now + 20, windowMillis: window)
                    == [LoginFailureWindow(key: "user:u1", start: now, failures: 4)])
            // Concurrent failures on both hosts: none is lost.
            try withThrowingTaskGroupLike(count: 20) { i in
                _ = try (i % 2 == 0 ? a : b).recordLoginFailure(keys: ["name:race"], now: now, windowMillis: window)
            }
            #expect(try b.loginFailures(keys: ["name:race"], now: now, windowMillis: window).first?.failures == 20)
            // Once the window closed it is not reported, and the next failure opens a new one.
            #expect(try a.loginFailures(keys: ["user:u1"], now: now + window, windowMillis: window).isEmpty)
            let fresh = try a.recordLoginFailure(keys: ["user:u1"], now: now + window, windowMillis: window)
            #expect(fresh == [LoginFailureWindow(key: "user:u1", start: now + window, failures: 1)])
        }

        @Test func theJobLockExcludesOtherHostsOnTheSameJobOnly() throws {
            let (a, b) = try Self.twoHosts()
            let order = Mutex<[String]>([])
            let inside = DispatchSemaphore(value: 0)
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                _ = try? a.withJobLock("nightly") { () throws(ParseError) -> Int in
                    order.withLock { $0.append("a in") }
                    inside.signal()
                    usleep(400_000)
                    order.withLock { $0.append("a out") }
                    return 0
                }
                done.signal()
            }
            #expect(inside.wait(timeout: .now() + 20) == .success)
            // Another job's lock is free at once; the same job's waits for a's transaction.
            try b.withJobLock("other") { () throws(ParseError) in order.withLock { $0.append("b other") } }
            try b.withJobLock("nightly") { () throws(ParseError) in order.withLock { $0.append("b in") } }
            #expect(done.wait(timeout: .now() + 20) == .success)
            #expect(order.withLock { $0 } == ["a in", "b other", "a out", "b in"])
        }

        @Test func aFlushReadsTheTotalsOfEveryHost() throws {
            let (a, b) = try Self.twoHosts()
            let hour: Int64 = 1_795_000_000_000 - 1_795_000_000_000 % 3_600_000
            let minute = hour + 120_000
            let month = (start: hour - 40 * 3_600_000, end: hour + 40 * 3_600_000)
            func batch(_ units: Int64, own: Int64) -> UsageBatch {
                UsageBatch(rows: [UsageRow(bucket: UsageBucket(kind: .account, key: "app", hour: hour), counts: UsageCounts(units: units)),
                                  UsageRow(bucket: UsageBucket(kind: .account, key: "ip:1", hour: hour), counts: UsageCounts(units: units))],
                           windows: [WindowCount(key: "ip:1", minute: minute, count: 99, own: own)], pruneWindowsBefore: minute)
            }
            func shared(_ s: PostgresStore, _ b: UsageBatch, monthStart: Int64 = month.start) throws -> SharedUsage? {
                try s.writeReadingShared(b, monthStart: monthStart, monthEnd: month.end, minute: minute)
            }
            #expect(try shared(a, batch(3, own: 3)) == SharedUsage(appMonthUnits: 3, windows: ["ip:1": 3]))
            // Each host writes its own part of a window (b's 4 beside a's 3), replaced on each flush.
            #expect(try shared(b, batch(4, own: 4)) == SharedUsage(appMonthUnits: 7, windows: ["ip:1": 7]))
            #expect(try shared(a, batch(1, own: 5)) == SharedUsage(appMonthUnits: 8, windows: ["ip:1": 9]))
            // An idle host's empty flush still learns the totals.
            #expect(try shared(b, UsageBatch(rows: [], windows: [], pruneWindowsBefore: minute))
                    == SharedUsage(appMonthUnits: 8, windows: ["ip:1": 9]))
            #expect(try a.loadTotals(monthStart: month.start, monthEnd: month.end, minute: minute).windows
                    == [WindowCount(key: "ip:1", minute: minute, count: 9)])
            #expect(try shared(a, UsageBatch(rows: [], windows: [], pruneWindowsBefore: minute), monthStart: hour + 3_600_000)?
                        .appMonthUnits == 0, "units of hours before the month are not counted")
        }
    }
}

/// Runs `body(0..<count)` on `count` threads at once and rethrows the first error.
func withThrowingTaskGroupLike(count: Int, _ body: @escaping @Sendable (Int) throws -> Void) throws {
    let errors = Mutex<[any Error]>([])
    let group = DispatchGroup()
    for i in 0..<count {
        group.enter()
        Thread.detachNewThread {
            do { try body(i) } catch { errors.withLock { $0.append(error) } }
            group.leave()
        }
    }
    group.wait()
    if let e = errors.withLock({ $0.first }) { throw e }
}
