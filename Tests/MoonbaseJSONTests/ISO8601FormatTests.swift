import MoonbaseCore
import Testing

/// `ISO8601.format`/`append` against a reference written digit by digit, and parse round trips.
@Suite struct ISO8601FormatTests {
    static func reference(_ millis: Int64) -> String {
        var ms = millis % 1000, secs = millis / 1000
        if ms < 0 { ms += 1000; secs -= 1 }
        var days = secs / 86400, rem = secs % 86400
        if rem < 0 { rem += 86400; days -= 1 }
        let (y, m, d) = ISO8601.civil(fromDays: days)
        func pad(_ v: Int64, _ n: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, n - s.count)) + s
        }
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(rem / 3600, 2)):\(pad(rem % 3600 / 60, 2)):\(pad(rem % 60, 2)).\(pad(ms, 3))Z"
    }

    @Test func formatsEveryFieldOfYearsZeroTo9999() {
        var fixed: [Int64] = [0, 1, 999, 1000, 86_399_999, 86_400_000, 951_782_400_000, 1_767_225_600_000,
                              1_798_761_599_999, -1, -62_167_219_200_000, 253_402_300_799_999]
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<2000 {
            x = x &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            fixed.append(Int64(x % 253_402_300_800_000) - 62_167_219_200_000)   // 0000-01-01 … 9999-12-31
        }
        for ms in fixed {
            let s = ISO8601.format(millis: ms)
            #expect(s == Self.reference(ms), "\(ms)")
            #expect(ISO8601.parse(s) == ms, "\(s)")
        }
        #expect(ISO8601.format(millis: 1_767_225_600_123) == "2026-01-01T00:00:00.123Z")
    }

    @Test func appendsToWhatIsThere() {
        var out = Array("x".utf8)
        ISO8601.append(millis: 0, to: &out)
        #expect(String(decoding: out, as: UTF8.self) == "x1970-01-01T00:00:00.000Z")
    }
}
