import CLuaBridge
import MoonbaseCore
import MoonbaseCrypto

/// `crypto.*` beyond `randomId`: digests, MACs, base64 and JWS signatures for webhooks, push
/// providers and sign-in checks. Lua strings are byte strings, so these read and return raw
/// bytes (a key or a decoded value need not be UTF-8):
/// - `crypto.sha256(s [, enc])`, `crypto.hmacSha256(key, s [, enc])`: the digest as lowercase
///   hex by default; `enc` = `"hex"`, `"raw"` (32 bytes), `"base64"` or `"base64url"`.
/// - `crypto.base64.encode(s)` / `decode(s)`: standard alphabet with `=` padding;
///   `crypto.base64url.encode(s)` / `decode(s)`: URL alphabet without padding (JWT's).
///   `decode` returns nil for text that is not base64.
/// - `crypto.sign(alg, pemKey, data)`: `"RS256"` or `"ES256"`; the raw signature (ES256: the
///   64-byte r‖s of JOSE), to be base64url-encoded into a JWT.
enum CryptoOp: CaseIterable {
    case sha256, hmacSha256, base64Encode, base64Decode, base64URLEncode, base64URLDecode, sign

    var luaName: (String, String) {
        switch self {
        case .sha256: return ("crypto", "sha256")
        case .hmacSha256: return ("crypto", "hmacSha256")
        case .base64Encode: return ("crypto.base64", "encode")
        case .base64Decode: return ("crypto.base64", "decode")
        case .base64URLEncode: return ("crypto.base64url", "encode")
        case .base64URLDecode: return ("crypto.base64url", "decode")
        case .sign: return ("crypto", "sign")
        }
    }
}

extension LuaVM {
    /// Runs a `crypto.*` function on the raw bytes of its string arguments.
    func dispatchCrypto(_ op: CryptoOp, _ args: UnsafeMutablePointer<lb_value>, _ n: Int, _ out: OpaquePointer) -> Int32 {
        let (ns, name) = op.luaName
        func bytes(_ i: Int, _ what: String) throws(ParseError) -> [UInt8] {
            guard i < n, args[i].type == Int32(LB_STR) else {
                throw ParseError(.scriptFailed, "\(ns).\(name): \(what) must be a string")
            }
            guard let p = args[i].str else { return [] }
            return Array(UnsafeRawBufferPointer(start: p, count: args[i].len))
        }
        func encoded(_ digest: [UInt8], _ i: Int) throws(ParseError) -> [UInt8] {
            guard i < n, args[i].type != Int32(LB_NIL) else { return Array(Hex.encode(digest).utf8) }
            switch String(decoding: try bytes(i, "the encoding"), as: UTF8.self) {
            case "hex": return Array(Hex.encode(digest).utf8)
            case "raw": return digest
            case "base64": return Array(Base64.encode(digest).utf8)
            case "base64url": return Array(Base64URL.encode(digest).utf8)
            default: throw ParseError(.scriptFailed, "\(ns).\(name): the encoding must be \"hex\", \"raw\", \"base64\" or \"base64url\"")
            }
        }
        let result: [UInt8]?
        do throws(ParseError) {
            switch op {
            case .sha256: result = try encoded(TokenHash.sha256(try bytes(0, "the data")), 1)
            case .hmacSha256:
                result = try encoded(HMACSHA256.mac(key: try bytes(0, "the key"), message: try bytes(1, "the data")), 2)
            case .base64Encode: result = Array(Base64.encode(try bytes(0, "the data")).utf8)
            case .base64URLEncode: result = Array(Base64URL.encode(try bytes(0, "the data")).utf8)
            case .base64Decode: result = Base64.decode(String(decoding: try bytes(0, "the text"), as: UTF8.self))
            case .base64URLDecode: result = Base64URL.decode(String(decoding: try bytes(0, "the text"), as: UTF8.self))
            case .sign:
                let algName = String(decoding: try bytes(0, "the algorithm"), as: UTF8.self)
                guard let alg = JWSSignature.Algorithm(rawValue: algName) else {
                    throw ParseError(.scriptFailed, "crypto.sign: the algorithm must be \"RS256\" or \"ES256\"")
                }
                let pem = try bytes(1, "the PEM key")
                let data = try bytes(2, "the data")
                do throws(JWSSignature.Failure) {
                    result = try JWSSignature.sign(alg, pem: pem, data: data)
                } catch {
                    throw ParseError(.scriptFailed, "crypto.sign: \(error.description)")
                }
            }
        } catch {
            return fail(out, error)
        }
        guard let result else {
            lb_out_nil(out)
            return 0
        }
        result.withUnsafeBufferPointer { b in
            b.withMemoryRebound(to: CChar.self) { lb_out_str(out, $0.baseAddress, $0.count) }
        }
        return 0
    }
}
