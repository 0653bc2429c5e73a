import Foundation
import MoonbaseAuth
import MoonbaseCore
import Synchronization
import Testing

@Suite("Concurrency", .timeLimit(.minutes(1)))
struct AuthConcurrencyTests {
    @Test func concurrentSignUpsOfOneNameCreateOneUser() throws {
        let f = try AuthFixture()
        let codes = Mutex<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: 6) { _ in
            let c = f.code { try f.signUp("same") } ?? 0
            codes.withLock { $0.append(c) }
        }
        let all = codes.withLock { $0 }.sorted()
        #expect(all == [0, 202, 202, 202, 202, 202])
    }

    @Test func concurrentResolvesAndRevocations() throws {
        let f = try AuthFixture()
        let a = try f.signUp("ned")
        let tokens = try (0..<4).map { _ in try f.auth.logIn(username: "ned", password: "secret-pw", ip: "").sessionToken }
        let wrong = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            for _ in 0..<200 {
                let t = tokens[i % tokens.count]
                if (try? f.auth.resolveSession(t))??.userId != a.userId { wrong.add(1, ordering: .relaxed) }
            }
        }
        #expect(wrong.load(ordering: .relaxed) == 0)
        try f.auth.revokeSessions(userId: a.userId, except: a.sessionId)
        for t in tokens { #expect(try f.auth.resolveSession(t) == nil) }
        #expect(try f.auth.resolveSession(a.sessionToken) != nil)
    }
}
