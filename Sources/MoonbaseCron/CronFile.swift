import Foundation
import MoonbaseCore
import MoonbaseJSON

/// One schedule line of a `.cron` file: when, in which zone, which job, with which params.
public struct CronEntry: Sendable, Equatable {
    /// The file it came from, as given to the parser (e.g. `cron/cleanup.cron`).
    public let file: String
    /// 1-based line in that file.
    public let line: Int
    /// The schedule.
    public let expression: CronExpression
    /// The zone the schedule's fields are read in (`CRON_TZ`, UTC by default).
    public let timeZone: TimeZone
    /// The zone's name as written after `CRON_TZ=` (`UTC` by default).
    public let timeZoneName: String
    /// The name given to `cloud.job`.
    public let job: String
    /// 1-based column of the job name (for "undefined job" errors).
    public let jobColumn: Int
    /// The params object passed to the job (`{}` when the line has none).
    public let params: JSONObject

    /// `file:line`, the schedule's identity in listings and logs.
    public var location: String { "\(file):\(line)" }

    /// Two entries with the same key describe the same schedule (used to keep a schedule's next
    /// fire time across a reload that did not change it).
    var scheduleKey: String {
        "\(expression.source)\u{1}\(timeZoneName)\u{1}\(job)\u{1}\(JSON.encodeString(.object(params)))"
    }
}

/// A parsed `cron/*.cron` file.
///
/// Format (crontab conventions, one schedule per line):
/// ```
/// # comment lines and blank lines are ignored
/// */5 * * * *  cleanupExpiredPosts  {"graceMinutes": 0}
/// @daily       digest
/// CRON_TZ=Europe/Berlin
/// 30 7 * * mon-fri  morningReport {"lang": "de"}
/// ```
/// - A schedule line is `EXPR JOB [PARAMS]`: five fields or a macro (see `CronExpression`), a job
///   name (`[A-Za-z_][A-Za-z0-9_.-]*`, defined by `cloud.job` in Cloud Code), and optionally a JSON
///   object passed to the job as `req.params` (the rest of the line; `{}` when absent).
/// - `CRON_TZ=Area/City` applies to the lines *after* it, up to the next `CRON_TZ` line, as in
///   cronie; lines before any `CRON_TZ` use UTC. Each file starts again at UTC. Other
///   `NAME=value` lines (`MAILTO=`, `PATH=`) are errors: Moonbase has no use for them.
/// - `#` starts a comment only at the beginning of a line (JSON params may contain `#`).
///
/// Errors carry `file:line:column`.
public struct CronFile: Sendable, Equatable {
    /// The name used in errors and listings.
    public let file: String
    /// The schedule lines, in file order.
    public let entries: [CronEntry]

    /// Parses the text of one file.
    ///
    /// - Parameters:
    ///   - text: the file's contents.
    ///   - file: the name to report in errors (e.g. `cron/cleanup.cron`).
    /// - Throws: `CronSyntaxError` at the first faulty line.
    public init(parsing text: String, file: String) throws(CronSyntaxError) {
        self.file = file
        var entries: [CronEntry] = []
        var zone = TimeZone(identifier: "UTC")!
        var zoneName = "UTC"
        var lineNo = 0
        for rawLine in text.utf8.split(separator: 10, omittingEmptySubsequences: false) {
            lineNo += 1
            var bytes = Array(rawLine)
            if bytes.last == 13 { bytes.removeLast() }
            var i = 0
            while i < bytes.count && CronExpression.isSpace(bytes[i]) { i += 1 }
            if i == bytes.count || bytes[i] == UInt8(ascii: "#") { continue }
            func col(_ at: Int) -> Int { CronExpression.column(of: at, in: bytes) }
            func fail(_ message: String, _ at: Int) -> CronSyntaxError {
                CronSyntaxError(message, file: file, line: lineNo, column: col(at))
            }
            if let (name, valueStart) = Self.assignment(bytes, from: i) {
                guard name == "CRON_TZ" else {
                    throw fail("only CRON_TZ=Area/City assignments are supported, not \(name)=", i)
                }
                var value = String(decoding: bytes[valueStart...], as: UTF8.self)
                    .trimmingCharacters(in: .whitespaces)
                if value.count >= 2, let q = value.first, q == "\"" || q == "'", value.last == q {
                    value = String(value.dropFirst().dropLast())
                }
                guard !value.isEmpty, let tz = TimeZone(identifier: value) else {
                    throw fail("unknown time zone '\(value)' (use an IANA name such as Europe/Berlin)", valueStart)
                }
                zone = tz
                zoneName = value
                continue
            }
            // The expression: one macro token or five fields.
            var end = i
            let tokens = bytes[i] == UInt8(ascii: "@") ? 1 : 5
            for k in 0..<tokens {
                if k > 0 { while end < bytes.count && CronExpression.isSpace(bytes[end]) { end += 1 } }
                while end < bytes.count && !CronExpression.isSpace(bytes[end]) { end += 1 }
            }
            let expression: CronExpression
            do {
                expression = try CronExpression(parsing: String(decoding: bytes[i..<end], as: UTF8.self))
            } catch {
                throw error.shifted(file: file, line: lineNo, columnOffset: col(i) - 1)
            }
            var j = end
            while j < bytes.count && CronExpression.isSpace(bytes[j]) { j += 1 }
            let jobStart = j
            while j < bytes.count && !CronExpression.isSpace(bytes[j]) { j += 1 }
            let job = String(decoding: bytes[jobStart..<j], as: UTF8.self)
            guard !job.isEmpty else { throw fail("missing job name after the schedule", jobStart) }
            guard Self.isJobName(bytes[jobStart..<j]) else {
                throw fail("invalid job name '\(job)' (letters, digits, _ . - ; not starting with a digit)", jobStart)
            }
            while j < bytes.count && CronExpression.isSpace(bytes[j]) { j += 1 }
            var params = JSONObject()
            if j < bytes.count {
                let value: JSONValue
                do {
                    value = try JSON.parse(Array(bytes[j...]))
                } catch {
                    throw fail("invalid JSON params: \(error.message)", j)
                }
                guard let object = value.objectValue else { throw fail("params must be a JSON object", j) }
                params = object
            }
            entries.append(CronEntry(file: file, line: lineNo, expression: expression, timeZone: zone,
                                     timeZoneName: zoneName, job: job, jobColumn: col(jobStart), params: params))
        }
        self.entries = entries
    }

    /// Every entry naming a job not in `jobs`, as errors at the job name (`moonbase check` and
    /// loading fail on the first).
    public func undefinedJobs(_ jobs: Set<String>) -> [CronSyntaxError] {
        entries.filter { !jobs.contains($0.job) }.map {
            CronSyntaxError("undefined job '\($0.job)' (no cloud.job(\"\($0.job)\", …) in the functions)",
                            file: file, line: $0.line, column: $0.jobColumn)
        }
    }

    /// Throws the first `undefinedJobs` error, if any.
    public func validateJobs(_ jobs: Set<String>) throws(CronSyntaxError) {
        if let first = undefinedJobs(jobs).first { throw first }
    }

    /// `NAME=` at `i` (a shell-style variable name, optional spaces around `=`): the name and
    /// where the value starts.
    private static func assignment(_ b: [UInt8], from i: Int) -> (String, Int)? {
        func isNameChar(_ c: UInt8, first: Bool) -> Bool {
            (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 95 || (!first && c >= 48 && c <= 57)
        }
        var j = i
        while j < b.count && isNameChar(b[j], first: j == i) { j += 1 }
        guard j > i else { return nil }
        let name = String(decoding: b[i..<j], as: UTF8.self)
        while j < b.count && (b[j] == 32 || b[j] == 9) { j += 1 }
        guard j < b.count && b[j] == UInt8(ascii: "=") else { return nil }
        return (name, j + 1)
    }

    private static func isJobName(_ s: ArraySlice<UInt8>) -> Bool {
        guard let f = s.first, !(f >= 48 && f <= 57), f != UInt8(ascii: "-"), f != UInt8(ascii: ".") else { return false }
        return s.allSatisfy { c in
            (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || c == 95 || c == 46 || c == 45
        }
    }
}
