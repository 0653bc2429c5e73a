import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore
import Testing

/// Values read through `ThreadSnapshot` (class schemas, the trigger runner, the Cloud Code
/// generation, cached query shapes) are per-thread copies: a thread that read a value before it
/// changed must see the change on its next read, whichever thread made it.
@Suite(.timeLimit(.minutes(1)))
struct ThreadSnapshotTests {
    /// Runs each job given to it on one and the same thread (so that thread's copies are reused).
    final class OneThread: @unchecked Sendable {
        private let jobs = DispatchSemaphore(value: 0)
        private let done = DispatchSemaphore(value: 0)
        private var job: (() -> Void)?

        init() {
            // Holds `self` until `stop` ends the thread.
            let t = Thread { [self] in
                while true {
                    self.jobs.wait()
                    guard let j = self.job else { return }
                    j()
                    self.done.signal()
                }
            }
            t.start()
        }

        func run<T>(_ body: @escaping () throws -> T) throws -> T {
            var result: Result<T, any Error>?
            job = { result = Result { try body() } }
            jobs.signal()
            done.wait()
            return try result!.get()
        }

        func stop() { job = nil; jobs.signal() }
    }

    @Test func aThreadSeesChangesMadeByAnotherAfterItsRead() throws {
        let s = ThreadSnapshot(1)
        let other = OneThread()
        defer { other.stop() }
        #expect(try other.run { s.current } == 1)
        s.update { $0 = 2 }
        #expect(try other.run { s.current } == 2)
        #expect(s.current == 2)
        try other.run { s.update { $0 += 10 } }
        #expect(s.current == 12)
        #expect(try other.run { s.current } == 12)
    }

    @Test func moreSnapshotsThanAThreadKeepsCopiesOfStayCorrect() throws {
        let all = (0..<40).map { ThreadSnapshot("v\($0)") }
        for round in 0..<3 {
            for (i, s) in all.enumerated() {
                #expect(s.current == (round == 0 ? "v\(i)" : "v\(i)-\(round)"))
                s.update { $0 = "v\(i)-\(round + 1)" }
            }
        }
        for (i, s) in all.enumerated().reversed() { #expect(s.current == "v\(i)-3") }
    }

    /// The class schemas: a field added (and committed) by a write on one thread is in the schema
    /// another thread reads next, though that thread read the class before.
    @Test func aSchemaChangeCommittedElsewhereIsSeenByAThreadThatReadTheClass() throws {
        let f = try StorageFixture()
        let store = f.store
        _ = try store.insert("Thing", fields: ["a": 1], acl: nil, identity: .master)
        let other = OneThread()
        defer { other.stop() }
        #expect(try other.run { store.catalog.schema("Thing")?.fields["b"] } == nil)
        _ = try store.insert("Thing", fields: ["b": "x"], acl: nil, identity: .master)
        #expect(try other.run { store.catalog.schema("Thing")?.fields["b"]?.type } == .string)
        #expect(try other.run { store.catalog.schema("Fresh") } == nil)
        try other.run { _ = try store.insert("Fresh", fields: ["c": true], acl: nil, identity: .master) }
        #expect(store.catalog.schema("Fresh")?.fields["c"]?.type == .boolean)
    }
}
