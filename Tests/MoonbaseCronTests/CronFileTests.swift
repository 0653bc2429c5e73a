import Foundation
import MoonbaseJSON
import Testing
@testable import MoonbaseCron

@Suite("CronFile")
struct CronFileTests {
    @Test func parsesTheReferenceAppFile() throws {
        let f = try CronFile(parsing: "*/5 * * * * cleanupExpiredPosts {\"graceMinutes\": 0}\n", file: "cron/cleanup.cron")
        #expect(f.entries.count == 1)
        let e = f.entries[0]
        #expect(e.job == "cleanupExpiredPosts")
        #expect(e.params["graceMinutes"] == .int(0))
        #expect(e.timeZoneName == "UTC")
        #expect(e.location == "cron/cleanup.cron:1")
        #expect(e.jobColumn == 13)
    }

    @Test func commentsBlankLinesMacrosAndCronTZ() throws {
        let text = """
        # nightly things
        @daily   digest

        \t# indented comment
        CRON_TZ=Europe/Berlin
        30 7 * * mon-fri morningReport {"lang": "de", "tags": ["#a"]}
        CRON_TZ = "America/New_York"\r
        0 9 1 * * monthly
        """
        let f = try CronFile(parsing: text, file: "x.cron")
        #expect(f.entries.map(\.job) == ["digest", "morningReport", "monthly"])
        #expect(f.entries.map(\.line) == [2, 6, 8])
        #expect(f.entries.map(\.timeZoneName) == ["UTC", "Europe/Berlin", "America/New_York"])
        #expect(f.entries[1].params["tags"] == .array([.string("#a")]))
        #expect(f.entries[0].params.isEmpty)
    }

    /// (file text, line, column, words of the message).
    static let errors: [(String, Int, Int, String)] = [
        ("*/5 * * * *\n", 1, 12, "missing job name"),
        ("\n  61 * * * * job\n", 2, 3, "out of range"),
        ("0 0 * * * job {\"a\":\n", 1, 15, "invalid JSON params"),
        ("0 0 * * * job [1, 2]\n", 1, 15, "must be a JSON object"),
        ("0 0 * * * 9lives\n", 1, 11, "invalid job name"),
        ("CRON_TZ=Mars/Olympus\n", 1, 9, "unknown time zone"),
        ("MAILTO=root\n", 1, 1, "only CRON_TZ"),
        ("# ok\n@sometimes job\n", 2, 1, "unknown macro"),
        ("0 0 * * 8 job\n", 1, 9, "out of range"),
    ]

    @Test("errors carry file:line:column", arguments: errors)
    func errorPositions(_ c: (String, Int, Int, String)) {
        #expect {
            try CronFile(parsing: c.0, file: "cron/t.cron")
        } throws: { error in
            guard let e = error as? CronSyntaxError else { return false }
            return e.file == "cron/t.cron" && e.line == c.1 && e.column == c.2 && e.message.contains(c.3)
        }
    }

    @Test func undefinedJobsAreLoadErrorsAtTheJobName() throws {
        let f = try CronFile(parsing: "@hourly known\n*/5 * * * *   missing {}\n", file: "cron/a.cron")
        #expect(throws: Never.self) { try f.validateJobs(["known", "missing"]) }
        let errors = f.undefinedJobs(["known"])
        #expect(errors.count == 1)
        #expect(errors.first?.description.hasPrefix("cron/a.cron:2:15: undefined job 'missing'") == true)
        #expect(throws: CronSyntaxError.self) { try f.validateJobs(["known"]) }
    }

    @Test func loadsADirectoryInNameOrder() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("cron-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try "@daily b\n".write(to: dir.appendingPathComponent("b.cron"), atomically: true, encoding: .utf8)
        try "@hourly a\n".write(to: dir.appendingPathComponent("a.cron"), atomically: true, encoding: .utf8)
        try "not cron".write(to: dir.appendingPathComponent("notes.txt"), atomically: true, encoding: .utf8)
        let files = try CronFile.loadDirectory(dir.path)
        #expect(files.map { $0.entries.map(\.job) } == [["a"], ["b"]])
        #expect(files[0].file.hasSuffix("/a.cron"))
        #expect(try CronFile.loadDirectory(dir.appendingPathComponent("absent").path).isEmpty)
    }

    @Test func listingShowsNextThreeTimesInISO8601() throws {
        let f = try CronFile(parsing: "*/5 * * * * cleanupExpiredPosts {\"graceMinutes\": 0}\n@reboot warm\n", file: "cron/cleanup.cron")
        let list = ScheduleListing.list([f], after: 1_764_447_825_678) // 2025-11-29T20:23:45.678Z
        #expect(list.count == 2)
        let json = list[0].json
        #expect(json["next"] == .array(["2025-11-29T20:25:00.000Z", "2025-11-29T20:30:00.000Z", "2025-11-29T20:35:00.000Z"]))
        #expect(json["location"] == .string("cron/cleanup.cron:1"))
        #expect(json["schedule"] == .string("*/5 * * * *"))
        #expect(json["running"] == .null)
        #expect(list[1].next.isEmpty)
    }
}
