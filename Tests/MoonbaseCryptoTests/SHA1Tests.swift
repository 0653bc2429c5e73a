import Testing
@testable import MoonbaseCrypto

@Suite struct SHA1Tests {
    @Test func knownDigests() {
        // FIPS 180 test vectors.
        #expect(Hex.encode(SHA1.digest(Array("abc".utf8))) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(Hex.encode(SHA1.digest([])) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
    }

    @Test func webSocketAcceptMatchesRFC6455Example() {
        // RFC 6455 section 1.3's worked example.
        #expect(SHA1.webSocketAccept(key: "dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    @Test func standardBase64RoundTripsWithPadding() {
        #expect(Base64.encode(Array("ab".utf8)) == "YWI=")
        #expect(Base64.decode("YWI=") == Array("ab".utf8))
        #expect(Base64.decode("YWI") == nil)
        #expect(Base64.decode("Y W") == nil)
    }
}
