import Foundation
import MoonbaseCore
import Testing
@testable import MoonbaseCron

/// Runs `tests/cron/oracle.py` (croniter 7.0.0 in the repo's `.venv`) on the given cases.
enum CroniterOracle {
    static let repoRoot: URL = URL(fileURLWithPath: #filePath).resolvingSymlinksInPath()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let python = repoRoot.appendingPathComponent(".venv/bin/python")
    static let script = repoRoot.appendingPathComponent("tests/cron/oracle.py")

    /// True when `.venv/bin/python` exists and imports croniter 7.0.0.
    static let available: Bool = {
        guard FileManager.default.isExecutableFile(atPath: python.path) else { return false }
        let p = Process()
        p.executableURL = python
        p.arguments = ["-c", "import importlib.metadata as m, sys; sys.exit(0 if m.version('croniter') == '7.0.0' else 1)"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        do { try p.run() } catch { return false }
        p.waitUntilExit()
        return p.terminationStatus == 0
    }()

    enum Answer: Equatable {
        case next([Int64])
        case invalid(String)
    }

    static func run(_ cases: [CronCase], count: Int) throws -> [Answer] {
        let items: [[String: Any]] = cases.map { ["expr": $0.expr, "tz": $0.tz, "start": $0.start, "count": count] }
        let input = try JSONSerialization.data(withJSONObject: ["cases": items])
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("cron-cases-\(UUID().uuidString).json")
        try input.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("cron-answers-\(UUID().uuidString).json")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: out) }
        let p = Process()
        p.executableURL = python
        p.arguments = [script.path, file.path]
        p.standardOutput = try FileHandle(forWritingTo: out)
        let err = Pipe()
        p.standardError = err
        try p.run()
        p.waitUntilExit()
        let errText = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        guard p.terminationStatus == 0 else {
            throw CocoaError(.executableLoad, userInfo: [NSLocalizedDescriptionKey: "oracle failed: \(errText)"])
        }
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: out)) as? [String: Any]
        let results = json?["results"] as? [[String: Any]] ?? []
        return results.map { r in
            if let msg = r["invalid"] as? String { return .invalid(msg) }
            return .next((r["next"] as? [NSNumber] ?? []).map { $0.int64Value })
        }
    }
}

@Suite("CronExpression vs croniter 7.0.0", .timeLimit(.minutes(1)))
struct CronDifferentialTests {
    @Test("2,400 random expressions × start times agree with croniter (3 successive times each)",
          .enabled(if: CroniterOracle.available,
                   "needs .venv/bin/python with croniter==7.0.0: python3 -m venv .venv && .venv/bin/pip install croniter==7.0.0"))
    func randomCasesAgree() throws {
        // CRON_DIFF_SEED / CRON_DIFF_COUNT widen the search by hand; the default run is fixed.
        let env = ProcessInfo.processInfo.environment
        var gen = CronCaseGenerator(seed: env["CRON_DIFF_SEED"].flatMap { UInt64($0) } ?? 0x5EED_C0DE_2026)
        let cases = gen.cases(env["CRON_DIFF_COUNT"].flatMap { Int($0) } ?? 2400)
        let answers = try CroniterOracle.run(cases, count: 3)
        try #require(answers.count == cases.count)
        var mismatches: [String] = []
        var valid = 0
        for (c, expected) in zip(cases, answers) {
            let mine: CroniterOracle.Answer
            do {
                let e = try CronExpression(parsing: c.expr)
                mine = .next(e.nextDates(after: c.start, count: 3, in: TimeZone(identifier: c.tz)!))
                valid += 1
            } catch {
                mine = .invalid(error.description)
            }
            switch (mine, expected) {
            case (.invalid, .invalid): continue
            case let (a, b) where a == b: continue
            default:
                mismatches.append("\(c.expr) tz=\(c.tz) start=\(c.start) (\(ISO8601.format(millis: c.start))): ours \(render(mine)), croniter \(render(expected))")
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.count) of \(cases.count) disagree:\n\(mismatches.prefix(25).joined(separator: "\n"))")
        #expect(valid > 2000, "too few valid cases (\(valid)) to be a meaningful comparison")
    }

    /// Hand-picked corners of croniter's parser, each from several zones and starts.
    static let corners = [
        "*,5 * * * *", "5-5 * * * *", "5-5/2 * * * *", "59/15 * * * *", "50-10/7 * * * *", "5-3/2 * * * *",
        "0 0 1-31 * mon", "0 0 */2 * mon", "0 0 1-31 * *", "0 0 * * 0-7", "0 0 * * 1-7", "0 0 * * 7",
        "0 0 * * 7/2", "0 0 * * sat-mon", "0 0 * * fri-tue/2", "0 0 * dec/3 *", "0 0 * nov-feb *",
        "0 0 * JAN-MAR/2 MON-FRI", "0 0 31 2 *", "0 0 30 2 mon", "0 0 31 */2 *", "0 0 29 2 *",
        "30 2 * * *", "30 1 * * *", "0,30 * * * *", "* * * * *", "*/1 */1 */1 */1 */1",
        "0 0 0 * *", "0 0 * 0 *", "* * * 13 *", "* * * * 8", "60 * * * *", "* 24 * * *", "*/0 * * * *",
        "1,,2 * * * *", "-5 * * * *", "5- * * * *", "1-2-3 * * * *", "mon * * * *", "* * * * jan",
        "* * * *", "*/5/2 * * * *", "*-5 * * * *", "@hourly", "@DAILY", "@weekly",
        "@monthly", "@yearly", "@annually", "@midnight", "00 007 01 01 0", "0 0 1 jan-jan *",
    ]

    @Test("croniter's parser corners agree (valid or not, and the times)",
          .enabled(if: CroniterOracle.available, "needs .venv/bin/python with croniter==7.0.0"))
    func cornersAgree() throws {
        var cases: [CronCase] = []
        let starts: [Int64] = [1_710_050_400_000, 1_730_613_600_000, 1_743_292_800_123, 1_704_067_200_000]
        for expr in Self.corners {
            for tz in ["UTC", "America/New_York", "Australia/Lord_Howe"] {
                for start in starts { cases.append(CronCase(expr: expr, tz: tz, start: start)) }
            }
        }
        let answers = try CroniterOracle.run(cases, count: 4)
        try #require(answers.count == cases.count)
        for (c, expected) in zip(cases, answers) {
            let mine: CroniterOracle.Answer
            do {
                mine = .next(try CronExpression(parsing: c.expr).nextDates(after: c.start, count: 4, in: TimeZone(identifier: c.tz)!))
            } catch {
                mine = .invalid(error.description)
            }
            switch (mine, expected) {
            case (.invalid, .invalid): continue
            default: #expect(mine == expected, "\(c.expr) tz=\(c.tz) start=\(c.start): ours \(render(mine)), croniter \(render(expected))")
            }
        }
    }

    private func render(_ a: CroniterOracle.Answer) -> String {
        switch a {
        case .invalid(let m): return "invalid(\(m))"
        case .next(let ts): return "[" + ts.map { ISO8601.format(millis: $0) }.joined(separator: ", ") + "]"
        }
    }
}
