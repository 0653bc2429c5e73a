import COpenSSL

/// JWS signatures (RFC 7518) with a PEM private key, through OpenSSL's libcrypto: what APNs, FCM
/// and Sign in with Apple tokens need.
///
/// - `RS256`: RSASSA-PKCS1-v1_5 with SHA-256 (an RSA key).
/// - `ES256`: ECDSA on P-256 with SHA-256, in JOSE's form: the 64 bytes r‖s (each left-padded to
///   32 bytes), not OpenSSL's DER.
///
/// Thread-safety: stateless; safe from any thread.
public enum JWSSignature {
    public enum Algorithm: String, Sendable {
        case rs256 = "RS256"
        case es256 = "ES256"
    }

    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// Signs `data` with the PEM private key (PKCS#8 `BEGIN PRIVATE KEY`, or the traditional
    /// `BEGIN RSA PRIVATE KEY` / `BEGIN EC PRIVATE KEY`).
    /// - Throws: `Failure` for a key that does not parse or does not fit the algorithm.
    public static func sign(_ alg: Algorithm, pem: [UInt8], data: [UInt8]) throws(Failure) -> [UInt8] {
        let key: OpaquePointer? = pem.withUnsafeBytes { raw -> OpaquePointer? in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        ERR_clear_error()
        guard let key else { throw Failure(description: "the key is not a PEM private key") }
        defer { EVP_PKEY_free(key) }
        let type = EVP_PKEY_get_base_id(key)
        switch alg {
        case .rs256:
            guard type == EVP_PKEY_RSA else { throw Failure(description: "RS256 needs an RSA private key") }
        case .es256:
            guard type == EVP_PKEY_EC, EVP_PKEY_get_bits(key) == 256 else {
                throw Failure(description: "ES256 needs a P-256 (prime256v1) EC private key")
            }
        }
        guard let ctx = EVP_MD_CTX_new() else { throw Failure(description: "out of memory") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, key) == 1 else {
            ERR_clear_error()
            throw Failure(description: "cannot sign with this key")
        }
        var len = 0
        guard EVP_DigestSign(ctx, nil, &len, data, data.count) == 1 else {
            ERR_clear_error()
            throw Failure(description: "cannot sign with this key")
        }
        var sig = [UInt8](repeating: 0, count: len)
        guard EVP_DigestSign(ctx, &sig, &len, data, data.count) == 1 else {
            ERR_clear_error()
            throw Failure(description: "signing failed")
        }
        sig.removeSubrange(len...)
        return alg == .es256 ? try joseECDSA(der: sig) : sig
    }

    /// DER `ECDSA-Sig-Value` → r‖s, 32 bytes each.
    static func joseECDSA(der: [UInt8]) throws(Failure) -> [UInt8] {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { b -> OpaquePointer? in
            var p: UnsafePointer<UInt8>? = b.baseAddress
            return d2i_ECDSA_SIG(nil, &p, b.count)
        }
        guard let parsed else { throw Failure(description: "signing failed (bad ECDSA signature)") }
        defer { ECDSA_SIG_free(parsed) }
        var out = [UInt8](repeating: 0, count: 64)
        guard let r = ECDSA_SIG_get0_r(parsed), let s = ECDSA_SIG_get0_s(parsed) else {
            throw Failure(description: "signing failed (bad ECDSA signature)")
        }
        let ok = out.withUnsafeMutableBufferPointer { b -> Bool in
            BN_bn2binpad(r, b.baseAddress, 32) == 32 && BN_bn2binpad(s, b.baseAddress! + 32, 32) == 32
        }
        guard ok else { throw Failure(description: "signing failed (bad ECDSA signature)") }
        return out
    }
}
