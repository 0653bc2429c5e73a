import Foundation
@testable import MoonbaseStore
import Testing

/// Class names, field names and dotted field paths, checked against the rules written as
/// regular expressions (the byte scanners in `Naming` must answer exactly as these do).
@Suite("Naming rules")
struct NamingTests {
    static func matches(_ s: String, _ pattern: String) -> Bool {
        s.range(of: pattern, options: .regularExpression) != nil
    }
    static func referenceField(_ s: String) -> Bool { matches(s, "^[A-Za-z][A-Za-z0-9_]{0,63}$") }
    static func referenceClass(_ s: String) -> Bool {
        if Naming.systemClasses.contains(s) { return true }
        return referenceField(s) && !s.contains("__") && !s.lowercased().hasPrefix("sqlite_")
    }
    static func referencePath(_ s: String) -> Bool {
        let parts = s.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count <= 8 && parts.allSatisfy { referenceField(String($0)) }
    }

    static let samples: [String] = {
        var out = ["", "a", "A", "_", "_User", "_Session", "_Role", "_Nope", "Post", "post_1", "1post", "p-st",
                   "a__b", "a_b_c", "a___", "ab__", "__ab", "sqlite_x", "SQLite_x", "sqlite", "Sqlite_", "café",
                   "a.b", "a..b", "a.", ".a", "a.b.c.d.e.f.g.h", "a.b.c.d.e.f.g.h.i", "a.1", "a._b", "a.b_c",
                   " a", "a ", "a\u{0}", "é", "a$b", "$score", String(repeating: "x", count: 64),
                   String(repeating: "x", count: 65), "a." + String(repeating: "y", count: 64),
                   "a." + String(repeating: "y", count: 65)]
        let alphabet = Array("aZ9_.-é".unicodeScalars)
        var state: UInt64 = 12345
        for _ in 0..<3000 {   // random short strings over a small alphabet
            state = state &* 6364136223846793005 &+ 1442695040888963407
            var s = ""
            for k in 0..<Int(state >> 60) {
                s.unicodeScalars.append(alphabet[Int((state >> UInt64(k * 3)) % UInt64(alphabet.count))])
            }
            out.append(s)
        }
        return out
    }()

    @Test func fieldNamesFollowTheRule() {
        for s in Self.samples { #expect(Naming.isValidFieldName(s) == Self.referenceField(s), "\(s)") }
    }

    @Test func classNamesFollowTheRule() {
        for s in Self.samples { #expect(Naming.isValidClassName(s) == Self.referenceClass(s), "\(s)") }
    }

    @Test func fieldPathsFollowTheRule() {
        for s in Self.samples { #expect(Naming.isValidFieldPath(s) == Self.referencePath(s), "\(s)") }
    }
}
