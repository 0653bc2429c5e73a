import MoonbaseCore
import Testing

/// The bounded log ring behind `GET /admin/logs` and `moonbase logs`.
@Suite struct LogRingTests {
    @Test func keepsTheNewestLinesInOrderAndFilters() {
        let ring = LogRing(capacity: 5)
        for i in 1...12 {
            ring.append(i % 3 == 0 ? .warn : .info, "line \(i)", source: "lua", requestId: i % 2 == 0 ? "even" : "odd",
                        fields: [("function", "f")], time: Int64(1000 * i))
        }
        let all = ring.lines()
        #expect(all.lines.map(\.message) == ["line 8", "line 9", "line 10", "line 11", "line 12"])
        #expect(all.lines.map(\.seq) == [8, 9, 10, 11, 12] && all.last == 12)
        #expect(ring.lines(since: 10).lines.map(\.seq) == [11, 12])
        #expect(ring.lines(minLevel: .warn).lines.map(\.message) == ["line 9", "line 12"])
        #expect(ring.lines(requestId: "even").lines.map(\.seq) == [8, 10, 12])
        #expect(ring.lines(sinceTime: 11_000).lines.map(\.seq) == [11, 12])
        #expect(ring.lines(limit: 2).lines.map(\.seq) == [11, 12])
        #expect(ring.lines(since: 12).lines.isEmpty && ring.lines(since: 12).last == 12)
        #expect(all.lines[0].field("function") == "f")
    }
}
