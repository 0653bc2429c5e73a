import CSodium

/// URL-safe base64 without padding (RFC 4648 §5), through libsodium's constant-time codec.
public enum Base64URL {
    /// libsodium's `sodium_base64_VARIANT_URLSAFE_NO_PADDING`.
    static let variant: Int32 = 7

    /// Encodes `bytes` (4 characters per 3 bytes, no `=`).
    public static func encode(_ bytes: [UInt8]) -> String { Base64Codec.encode(bytes, variant: variant) }

    /// Decodes URL-safe unpadded base64; nil on any other character or a bad length.
    public static func decode(_ text: String) -> [UInt8]? { Base64Codec.decode(text, variant: variant) }
}

/// Standard base64 with `=` padding (RFC 4648 §4), through libsodium.
public enum Base64 {
    /// libsodium's `sodium_base64_VARIANT_ORIGINAL`.
    static let variant: Int32 = 1

    public static func encode(_ bytes: [UInt8]) -> String { Base64Codec.encode(bytes, variant: variant) }

    /// Decodes padded standard base64; nil on any other character or a bad length.
    public static func decode(_ text: String) -> [UInt8]? { Base64Codec.decode(text, variant: variant) }
}

/// libsodium's codec, shared by both alphabets.
enum Base64Codec {
    static func encode(_ bytes: [UInt8], variant: Int32) -> String {
        precondition(Sodium.ready)
        let capacity = sodium_base64_encoded_len(bytes.count, variant)
        var out = [CChar](repeating: 0, count: capacity)
        bytes.withUnsafeBufferPointer { b in
            _ = sodium_bin2base64(&out, capacity, b.baseAddress, b.count, variant)
        }
        return string(fromNulTerminated: out)
    }

    static func decode(_ text: String, variant: Int32) -> [UInt8]? {
        precondition(Sodium.ready)
        let input = Array(text.utf8)
        var out = [UInt8](repeating: 0, count: input.count * 3 / 4 + 1)
        var written = 0
        let ok = input.withUnsafeBufferPointer { inp in
            inp.withMemoryRebound(to: CChar.self) { p -> Bool in
                guard let base = p.baseAddress else { return true }
                var end: UnsafePointer<CChar>? = nil
                let rc = sodium_base642bin(&out, out.count, base, p.count, nil, &written, &end, variant)
                // libsodium stops at the first invalid character and reports it through `end`.
                return rc == 0 && end.map { $0 - base } == p.count
            }
        }
        guard ok else { return nil }
        return Array(out[0..<written])
    }
}
