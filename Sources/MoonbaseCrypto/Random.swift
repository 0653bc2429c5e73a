import CSodium

/// Random identifiers and bytes from libsodium's CSPRNG (`randombytes_buf`).
///
/// Thread-safety: libsodium's RNG is thread-safe after `sodium_init`, which `Sodium.ready`
/// runs exactly once (a `static let` is initialised under `swift_once`).
public enum Random {
    static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)

    /// `count` random bytes.
    public static func bytes(_ count: Int) -> [UInt8] {
        precondition(Sodium.ready)
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, count) }
        return out
    }

    /// `length` alphanumeric characters (Parse's objectId alphabet), uniform: a random byte
    /// below 248 (4 × 62) picks `alphabet[byte % 62]` with no modulo bias; a byte at or above it
    /// is skipped (1 in 32). The bytes are drawn in one call: libsodium's system RNG makes one
    /// `getrandom` system call per call, and one call per character (`randombytes_uniform`) cost
    /// a create ten of them (2% of W2's CPU).
    public static func alphanumeric(_ length: Int = 10) -> String {
        precondition(Sodium.ready)
        var out = [UInt8]()
        out.reserveCapacity(length)
        let limit = UInt8(256 - 256 % alphabet.count)
        while out.count < length {
            // Enough for the rest with a margin: skipping more than a few bytes is rare.
            for b in bytes(length - out.count + 8) where b < limit {
                out.append(alphabet[Int(b) % alphabet.count])
                if out.count == length { break }
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Lower-case hex of `count` random bytes.
    public static func hex(_ count: Int) -> String { Hex.encode(bytes(count)) }
}

/// Lower-case hexadecimal.
public enum Hex {
    public static func encode(_ bytes: [UInt8]) -> String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }
}

/// One-time libsodium initialisation.
public enum Sodium {
    public static let ready: Bool = sodium_init() >= 0
}
