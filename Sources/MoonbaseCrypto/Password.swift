import CSodium

/// Password hashing with argon2id (libsodium `crypto_pwhash_str_alg`).
///
/// Parameters are pinned by the contract: t = 2 passes, m = 19 MiB, p = 1 (libsodium always uses
/// one lane), algorithm Argon2id v1.3. The result is the self-describing PHC string
/// `$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>` with a fresh 16-byte salt, so `verify` needs
/// nothing else and a later change of parameters can be detected with `needsRehash`.
///
/// Cost (measured on the project's 2-vCPU Debian 12 box; `PasswordTests.measureCost` prints it):
/// about 14 ms of CPU time (and 14 ms wall on a quiet core) per `hash` or `verify`, plus 19 MiB of
/// memory touched while it runs: roughly 70 hashes per second per core. That is why hashing runs on a worker thread, never on an HTTP
/// I/O thread: one hash stalls every connection of the thread that runs it.
///
/// Thread-safety: stateless; safe from any thread (libsodium is initialised once by `Sodium.ready`).
public enum Password {
    /// Passes over memory (argon2 `t`).
    public static let opsLimit: UInt64 = 2
    /// Memory in bytes (argon2 `m` = 19456 KiB).
    public static let memLimit: Int = 19 * 1024 * 1024

    /// Hashes `password` into an encoded argon2id string (at most 127 ASCII characters).
    ///
    /// Traps only when libsodium cannot allocate its 19 MiB work area, the same policy Swift
    /// applies to any failed allocation (libsodium's only other failure, a password longer than
    /// 4 GiB, cannot occur behind the 1 MiB body limit).
    public static func hash(_ password: String) -> String {
        precondition(Sodium.ready)
        var out = [CChar](repeating: 0, count: Int(crypto_pwhash_strbytes()))
        var pw = cBytes(password)
        defer { sodium_memzero(&pw, pw.count) }
        let rc = crypto_pwhash_str_alg(&out, pw, UInt64(pw.count - 1), opsLimit, memLimit,
                                       crypto_pwhash_alg_argon2id13())
        precondition(rc == 0, "argon2id: could not allocate its work area")
        return string(fromNulTerminated: out)
    }

    /// True when `password` matches `encoded` (a string made by `hash`, or any argon2 PHC string
    /// libsodium understands). A malformed `encoded` value is simply a mismatch.
    ///
    /// libsodium compares the derived hash in constant time.
    public static func verify(_ password: String, against encoded: String) -> Bool {
        precondition(Sodium.ready)
        // crypto_pwhash_str_verify reads at most STRBYTES bytes, NUL-terminated.
        guard encoded.utf8.count < Int(crypto_pwhash_strbytes()), !encoded.utf8.contains(0) else { return false }
        var pw = cBytes(password)
        defer { sodium_memzero(&pw, pw.count) }
        return encoded.withCString { crypto_pwhash_str_verify($0, pw, UInt64(pw.count - 1)) } == 0
    }

    /// True when `encoded` was made with other parameters than the current ones (or is not a
    /// valid argon2id string), so the caller should re-hash the password after a good login.
    public static func needsRehash(_ encoded: String) -> Bool {
        precondition(Sodium.ready)
        guard encoded.utf8.count < Int(crypto_pwhash_strbytes()), !encoded.utf8.contains(0) else { return true }
        return encoded.withCString { crypto_pwhash_str_needs_rehash($0, opsLimit, memLimit) } != 0
    }

    /// The UTF-8 bytes of `s` as C characters with a trailing NUL (so the buffer is never empty).
    static func cBytes(_ s: String) -> [CChar] {
        var out = s.utf8.map { CChar(bitPattern: $0) }
        out.append(0)
        return out
    }
}

/// The text before the first NUL of a C buffer, decoded as UTF-8.
func string(fromNulTerminated buffer: [CChar]) -> String {
    let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
    return String(decoding: bytes, as: UTF8.self)
}
