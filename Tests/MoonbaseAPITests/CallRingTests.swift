import Foundation
@testable import MoonbaseAPI
import Testing

/// The dashboard's ring of recent Cloud Code calls: appended from every worker at once without a
/// ring-wide lock, it must still list the newest calls first, keep at most `capacity`, filter,
/// and lose no call that was not pushed out by later ones.
@Suite(.timeLimit(.minutes(1)))
struct CallRingTests {
    func record(_ i: Int, target: String = "function:f", status: Int = 200) -> CallRecord {
        CallRecord(time: Int64(i), requestId: "r\(i)", target: target, caller: "app", status: status, wallMicros: 1,
                   luaCpuMicros: 1, dbReads: 0, dbWrites: 0, errorCode: nil, error: nil)
    }

    @Test func newestFirstBoundedAndFiltered() {
        let ring = CallRing(capacity: 5)
        #expect(ring.recent(limit: 10).isEmpty)
        for i in 0..<3 { ring.append(record(i)) }
        #expect(ring.recent(limit: 10).map(\.requestId) == ["r2", "r1", "r0"])
        for i in 3..<12 { ring.append(record(i, target: i % 2 == 0 ? "function:even" : "function:odd", status: i == 9 ? 500 : 200)) }
        #expect(ring.recent(limit: 10).map(\.requestId) == ["r11", "r10", "r9", "r8", "r7"])
        #expect(ring.recent(limit: 2).map(\.requestId) == ["r11", "r10"])
        #expect(ring.recent(limit: 10, target: "function:even").map(\.requestId) == ["r10", "r8"])
        #expect(ring.recent(limit: 10, failed: true).map(\.requestId) == ["r9"])
    }

    @Test func appendsFromManyThreadsKeepTheLastCapacityCalls() async {
        let ring = CallRing(capacity: 64)
        let threads = 4, each = 2_000
        await withTaskGroup(of: Void.self) { g in
            for t in 0..<threads {
                g.addTask { for i in 0..<each { ring.append(record(t * each + i)) } }
            }
        }
        let got = ring.recent(limit: 1_000)
        #expect(got.count == 64)
        #expect(Set(got.map(\.requestId)).count == 64)
        // Each thread's own calls appear newest first.
        for t in 0..<threads {
            let mine = got.map(\.time).filter { Int($0) / each == t }
            #expect(mine == mine.sorted(by: >))
        }
    }
}
