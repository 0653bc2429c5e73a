#if canImport(Glibc)
import Glibc
#endif

/// Which addresses outbound HTTP may connect to.
///
/// Refused unless allowed: loopback, private, link-local (cloud metadata lives there),
/// carrier-grade NAT, "this network", unique-local, unspecified and IPv4-mapped addresses
/// (127/8, 10/8, 172.16/12, 192.168/16, 169.254/16, 100.64/10, 0/8, ::1, ::, fc00::/7,
/// fe80::/10, ::ffff:0:0/96). The allow list (`MOONBASE_HTTP_ALLOW`, comma-separated addresses
/// and CIDR blocks) wins over the refusals; an IPv4-mapped address is also matched by its IPv4
/// form. Checked on the address a socket is about to connect to, after DNS, for every hop.
///
/// Thread-safety: immutable.
public struct AddressPolicy: Sendable {
    /// A CIDR block over 4 or 16 bytes.
    struct Block: Sendable {
        let bytes: [UInt8]
        let prefix: Int
        let label: String

        func contains(_ a: [UInt8]) -> Bool {
            guard a.count == bytes.count else { return false }
            var bits = prefix
            var i = 0
            while bits > 0 {
                let mask: UInt8 = bits >= 8 ? 0xFF : UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
                if a[i] & mask != bytes[i] & mask { return false }
                bits -= 8
                i += 1
            }
            return true
        }

        /// "10.0.0.0/8", "::1", "fc00::/7".
        static func parse(_ text: String, label: String) -> Block? {
            let parts = text.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count <= 2, let bytes = AddressPolicy.parseAddress(String(parts[0])) else { return nil }
            var prefix = bytes.count * 8
            if parts.count == 2 {
                guard let p = Int(parts[1]), p >= 0, p <= prefix else { return nil }
                prefix = p
            }
            return Block(bytes: bytes, prefix: prefix, label: label)
        }
    }

    static let refused: [Block] = [
        ("127.0.0.0/8", "loopback"), ("10.0.0.0/8", "private"), ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"), ("169.254.0.0/16", "link-local"), ("100.64.0.0/10", "carrier-grade NAT"),
        ("0.0.0.0/8", "unspecified"), ("::1/128", "loopback"), ("::/128", "unspecified"),
        ("fc00::/7", "unique-local"), ("fe80::/10", "link-local"), ("::ffff:0:0/96", "IPv4-mapped"),
    ].map { Block.parse($0.0, label: $0.1)! }

    let allowed: [Block]

    /// No allow list: every refused range stays refused.
    public static let strict = AddressPolicy(blocks: [])
    init(blocks: [Block]) { allowed = blocks }

    /// - Parameter allow: the comma-separated list (`MOONBASE_HTTP_ALLOW`); nil or empty allows none.
    /// - Throws: `AddressPolicyError` naming an entry that is neither an address nor a CIDR block.
    public init(allow: String?) throws(AddressPolicyError) {
        var blocks: [Block] = []
        for raw in (allow ?? "").split(separator: ",") {
            let entry = String(raw).trimmingCharacters(" ")
            if entry.isEmpty { continue }
            guard let b = Block.parse(entry, label: "allowed") else { throw AddressPolicyError(entry: entry) }
            blocks.append(b)
        }
        allowed = blocks
    }

    /// Why `address` (4 or 16 bytes) is refused, or nil when it may be connected to.
    public func refusal(_ address: [UInt8]) -> String? {
        if allowed.contains(where: { $0.contains(address) }) { return nil }
        if address.count == 16, address[0..<10].allSatisfy({ $0 == 0 }), address[10] == 0xFF, address[11] == 0xFF,
           allowed.contains(where: { $0.contains(Array(address[12...])) }) {
            return nil
        }
        return AddressPolicy.refused.first { $0.contains(address) }?.label
    }

    /// The 4 or 16 bytes of a textual IPv4 or IPv6 address.
    public static func parseAddress(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }

    /// The textual form of 4 or 16 address bytes.
    public static func format(_ bytes: [UInt8]) -> String {
        var buf = [CChar](repeating: 0, count: 64)
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        _ = bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &buf, socklen_t(buf.count)) }
        return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// An entry of `MOONBASE_HTTP_ALLOW` that is neither an address nor a CIDR block.
public struct AddressPolicyError: Error, Sendable {
    public let entry: String
}

extension String {
    func trimmingCharacters(_ c: Character) -> String {
        var s = Substring(self)
        while s.first == c { s = s.dropFirst() }
        while s.last == c { s = s.dropLast() }
        return String(s)
    }
}
