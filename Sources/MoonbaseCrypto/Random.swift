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

    /// `length` alphanumeric characters (Parse's objectId alphabet), uniform (rejection-free:
    /// `randombytes_uniform` avoids modulo bias).
    public static func alphanumeric(_ length: Int = 10) -> String {
        precondition(Sodium.ready)
        var out = [UInt8](repeating: 0, count: length)
        for i in 0..<length { out[i] = alphabet[Int(randombytes_uniform(UInt32(alphabet.count)))] }
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
