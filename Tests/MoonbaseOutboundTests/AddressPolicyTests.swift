import Testing
@testable import MoonbaseOutbound

/// The address guard of outbound HTTP: every refused range, the allow list (addresses and CIDR
/// blocks, IPv4-mapped forms) and malformed allow entries.
@Suite struct AddressPolicyTests {
    func refusal(_ policy: AddressPolicy, _ address: String) -> String? {
        policy.refusal(AddressPolicy.parseAddress(address)!)
    }

    @Test(arguments: [
        ("127.0.0.1", "loopback"), ("127.255.0.9", "loopback"), ("10.1.2.3", "private"), ("172.16.0.1", "private"),
        ("172.31.255.255", "private"), ("192.168.1.1", "private"), ("169.254.169.254", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"), ("100.127.255.255", "carrier-grade NAT"), ("0.0.0.0", "unspecified"),
        ("::1", "loopback"), ("::", "unspecified"), ("fc00::1", "unique-local"), ("fd00:ec2::254", "unique-local"),
        ("fe80::1", "link-local"), ("::ffff:127.0.0.1", "IPv4-mapped"), ("::ffff:8.8.8.8", "IPv4-mapped"),
    ])
    func refusedRanges(address: String, label: String) {
        #expect(refusal(.strict, address) == label)
    }

    @Test(arguments: ["8.8.8.8", "172.32.0.1", "172.15.255.255", "100.128.0.1", "192.169.0.1", "2001:4860:4860::8888", "11.0.0.1"])
    func publicAddressesPass(address: String) {
        #expect(refusal(.strict, address) == nil)
    }

    @Test func allowListWins() throws {
        let p = try AddressPolicy(allow: " 127.0.0.1 , 10.1.0.0/16,::1")
        #expect(refusal(p, "127.0.0.1") == nil)
        #expect(refusal(p, "127.0.0.2") == "loopback")
        #expect(refusal(p, "10.1.200.3") == nil)
        #expect(refusal(p, "10.2.0.1") == "private")
        #expect(refusal(p, "::1") == nil)
        // The IPv4-mapped form of an allowed address is allowed too.
        #expect(refusal(p, "::ffff:127.0.0.1") == nil)
        #expect(refusal(p, "::ffff:127.0.0.2") == "IPv4-mapped")
    }

    @Test(arguments: ["localhost", "10.0.0.0/33", "1.2.3", "::1/129", "10.0.0.0/x"])
    func malformedAllowEntriesAreRejected(entry: String) {
        #expect(throws: AddressPolicyError.self) { try AddressPolicy(allow: entry) }
    }

    @Test func emptyAllowListAllowsNothingExtra() throws {
        let p = try AddressPolicy(allow: "")
        #expect(refusal(p, "127.0.0.1") == "loopback")
    }
}
