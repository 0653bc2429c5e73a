import Testing

@testable import MoonbaseCrypto

@Suite("Tokens, hashes and constant-time compares")
struct TokenTests {
    @Test func sessionTokenShape() {
        let t = SessionToken.generate()
        #expect(t.hasPrefix("r:"))
        #expect(t.count == 2 + 43)
        let body = String(t.dropFirst(2))
        #expect(body.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" })
        #expect(Base64URL.decode(body)?.count == 32)
        #expect(SessionToken.generate(prefix: "rt:").hasPrefix("rt:"))
    }

    @Test func sessionTokensAreUnique() {
        var seen = Set<String>()
        for _ in 0..<1000 { seen.insert(SessionToken.generate()) }
        #expect(seen.count == 1000)
    }

    @Test(arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
    ])
    func sha256KnownVectors(_ input: String, _ expected: String) {
        #expect(TokenHash.sha256Hex(input) == expected)
    }

    @Test func tokenHashHidesToken() {
        let t = SessionToken.generate()
        let h = TokenHash.sha256Hex(t)
        #expect(h.count == 64)
        #expect(!h.contains(String(t.dropFirst(2))))
        #expect(TokenHash.sha256Hex(t) == h)
    }

    @Test(arguments: [
        ("", "", true), ("a", "a", true), ("master-key", "master-key", true),
        ("master-key", "master-kez", false), ("master-key", "master-ke", false),
        ("", "x", false), ("x", "", false), ("é", "e\u{301}", false),
        // Past the 15 bytes a string holds inline: heap storage on both sides.
        ("a-master-key-of-forty-bytes-or-so-123456", "a-master-key-of-forty-bytes-or-so-123456", true),
        ("a-master-key-of-forty-bytes-or-so-123456", "a-master-key-of-forty-bytes-or-so-123457", false),
        ("short", "a-master-key-of-forty-bytes-or-so-123456", false),
    ])
    func constantTimeEquals(_ a: String, _ b: String, _ expected: Bool) {
        #expect(ConstantTime.equals(a, b) == expected)
    }

    @Test func base64URLRoundTripAndRejects() {
        for n in 0..<40 {
            let bytes = Random.bytes(n)
            let text = Base64URL.encode(bytes)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(Base64URL.decode(text) == bytes)
        }
        #expect(Base64URL.encode(Array("hello?>".utf8)) == "aGVsbG8_Pg")
        #expect(Base64URL.decode("aGVsbG8/Pg") == nil)
        #expect(Base64URL.decode("aGVsbG8_Pg==") == nil)
        #expect(Base64URL.decode("a") == nil)
        #expect(Base64URL.decode("") == [])
    }

    @Test func randomHelpers() {
        #expect(Random.alphanumeric(10).count == 10)
        #expect(Random.hex(16).count == 32)
        #expect(Hex.encode([0, 255, 16]) == "00ff10")
    }

    @Test func alphanumericIdsUseEveryCharacterEvenly() {
        #expect(Random.alphanumeric(1).count == 1 && Random.alphanumeric(40).count == 40)
        // 248,000 characters: 4,000 of each of the 62 expected (standard deviation about 63,
        // the bounds are 5.5 of them). A biased draw (byte % 62 over all 256 values) would give
        // the first 8 characters about 4,840 each.
        var counts: [Character: Int] = [:]
        for _ in 0..<24_800 {
            for c in Random.alphanumeric(10) { counts[c, default: 0] += 1 }
        }
        #expect(counts.count == 62)
        #expect(counts.keys.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) })
        let low = counts.values.min() ?? 0, high = counts.values.max() ?? 0
        #expect(low > 3_650 && high < 4_350, "per-character counts \(low)...\(high)")
    }
}
