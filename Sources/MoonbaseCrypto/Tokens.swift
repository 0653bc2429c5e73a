import CSodium

/// Session, refresh and other bearer tokens: 32 bytes from the CSPRNG.
///
/// Tokens are returned to the client once and stored only as `TokenHash.sha256Hex(token)`; a
/// lookup hashes the presented token and finds the row by that hash, so a copy of the database
/// holds no usable token.
///
/// Thread-safety: stateless; safe from any thread.
public enum SessionToken {
    /// Random bytes per token (256 bits).
    public static let byteCount = 32

    /// `r:` followed by 43 URL-safe base64 characters (32 random bytes, no padding).
    ///
    /// The `r:` prefix marks a revocable session the way Parse Server's tokens do; the rest is
    /// safe in headers, URLs and form bodies without escaping.
    public static func generate() -> String {
        "r:" + Base64URL.encode(Random.bytes(byteCount))
    }

    /// A token with a different prefix (e.g. `"rt:"` for OAuth refresh tokens), same strength.
    public static func generate(prefix: String) -> String {
        prefix + Base64URL.encode(Random.bytes(byteCount))
    }
}

/// Hashes of bearer tokens, as stored in the database.
///
/// SHA-256 (libsodium `crypto_hash_sha256`) is right here, unlike for passwords: a token has 256
/// bits of entropy, so there is nothing to brute-force and a fast hash keeps lookups cheap.
public enum TokenHash {
    /// Lower-case hex SHA-256 of the token's UTF-8 bytes (64 characters).
    public static func sha256Hex(_ token: String) -> String {
        Hex.encode(sha256(Array(token.utf8)))
    }

    /// Raw SHA-256 digest (32 bytes).
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        precondition(Sodium.ready)
        var out = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_bytes()))
        crypto_hash_sha256(&out, bytes, UInt64(bytes.count))
        return out
    }
}

/// Comparison of secrets (the master key, REST key) whose timing does not depend on where the
/// inputs first differ.
public enum ConstantTime {
    /// True when `a` and `b` have the same UTF-8 bytes.
    ///
    /// Lengths are compared first, which reveals only whether the lengths match; when they do
    /// not, the same `sodium_memcmp` work still runs (over `a` against itself) so the answer
    /// time does not depend on the content either way. Put the secret in `b`.
    ///
    /// Over the strings' own UTF-8 storage: every Parse request compares its application id
    /// this way, and copying both strings into arrays first cost two allocations (~1,200
    /// instructions) per request.
    public static func equals(_ a: String, _ b: String) -> Bool {
        precondition(Sodium.ready)
        var a = a, b = b
        return a.withUTF8 { x in
            b.withUTF8 { y in
                let sameLength = x.count == y.count
                let other = sameLength ? y : x
                let equal = x.isEmpty ? true : sodium_memcmp(x.baseAddress!, other.baseAddress!, x.count) == 0
                return sameLength && equal
            }
        }
    }
}
