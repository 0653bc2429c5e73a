import COpenSSL

/// SHA-1, for protocols that mandate it (the WebSocket handshake's `Sec-WebSocket-Accept`).
///
/// Not for anything security-bearing: SHA-1 is broken for collision resistance. libsodium has no
/// SHA-1, so this comes from OpenSSL's libcrypto.
///
/// Thread-safety: stateless; safe from any thread.
public enum SHA1 {
    /// The 20-byte digest of `bytes`.
    public static func digest(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 20)
        bytes.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { output in
                _ = COpenSSL.SHA1(input.baseAddress, input.count, output.baseAddress)
            }
        }
        return out
    }

    /// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`: base64(SHA-1(key + GUID)).
    public static func webSocketAccept(key: String) -> String {
        let guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        return Base64.encode(digest(Array((key + guid).utf8)))
    }
}
