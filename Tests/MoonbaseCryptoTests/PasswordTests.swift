import Foundation
import MoonbaseCore
import Testing

@testable import MoonbaseCrypto

@Suite("Password hashing (argon2id)")
struct PasswordTests {
    @Test func hashUsesContractParameters() {
        let encoded = Password.hash("correct horse battery staple")
        #expect(encoded.hasPrefix("$argon2id$v=19$m=19456,t=2,p=1$"))
        #expect(!encoded.contains("correct horse"))
        #expect(!Password.needsRehash(encoded))
    }

    @Test func verifyAcceptsOnlyTheRightPassword() {
        let encoded = Password.hash("s3cret-пароль")
        #expect(Password.verify("s3cret-пароль", against: encoded))
        #expect(!Password.verify("s3cret-пароль ", against: encoded))
        #expect(!Password.verify("", against: encoded))
        #expect(!Password.verify("S3cret-пароль", against: encoded))
    }

    @Test func saltsDiffer() {
        let a = Password.hash("same"), b = Password.hash("same")
        #expect(a != b)
        #expect(Password.verify("same", against: a) && Password.verify("same", against: b))
    }

    @Test func emptyPasswordRoundTrips() {
        let encoded = Password.hash("")
        #expect(Password.verify("", against: encoded))
        #expect(!Password.verify("x", against: encoded))
    }

    @Test(arguments: ["", "plaintext", "$argon2id$v=19$m=19456,t=2,p=1$bad", String(repeating: "a", count: 500),
                      "$argon2id$v=19$m=19456,t=2,p=1$\u{0}zz"])
    func malformedEncodingIsAMismatch(_ encoded: String) {
        #expect(!Password.verify("anything", against: encoded))
        #expect(Password.needsRehash(encoded))
    }

    @Test func weakerParametersNeedRehash() {
        // A valid argon2id string made with t=1 (libsodium's format, from its own test vectors' shape).
        let encoded = Password.hash("pw").replacingOccurrences(of: "t=2", with: "t=1")
        #expect(Password.needsRehash(encoded))
    }

    /// Measures the cost quoted in `Password`'s doc comment (printed, not asserted: timing on a
    /// shared machine is not a test).
    @Test func measureCost() {
        _ = Password.hash("warm-up")
        let rounds = 5
        let wall0 = monotonicNanos(), cpu0 = threadCPUNanos()
        var last = ""
        for i in 0..<rounds { last = Password.hash("password \(i)") }
        let hashWall = Double(monotonicNanos() - wall0) / Double(rounds) / 1e6
        let hashCPU = Double(threadCPUNanos() - cpu0) / Double(rounds) / 1e6
        let wall1 = monotonicNanos(), cpu1 = threadCPUNanos()
        for _ in 0..<rounds { _ = Password.verify("password \(rounds - 1)", against: last) }
        let verifyWall = Double(monotonicNanos() - wall1) / Double(rounds) / 1e6
        let verifyCPU = Double(threadCPUNanos() - cpu1) / Double(rounds) / 1e6
        print(String(format: "argon2id t=2 m=19MiB: hash %.1f ms wall / %.1f ms CPU; verify %.1f ms wall / %.1f ms CPU",
                     hashWall, hashCPU, verifyWall, verifyCPU))
        #expect(Password.verify("password \(rounds - 1)", against: last))
    }
}
