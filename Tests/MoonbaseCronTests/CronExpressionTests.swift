import Foundation
import Testing
@testable import MoonbaseCron

@Suite("CronExpression parsing")
struct CronExpressionTests {
    /// (expression, minute values, hour values, day-of-month, month, day-of-week); nil = `*`.
    static let expansions: [(String, [Int]?, [Int]?, [Int]?, [Int]?, [Int]?)] = [
        ("* * * * *", nil, nil, nil, nil, nil),
        ("*/15 0-6/2 1,15 * *", [0, 15, 30, 45], [0, 2, 4, 6], [1, 15], nil, nil),
        ("5/20 * * * *", [5, 25, 45], nil, nil, nil, nil),
        ("59/15 * * * *", [59], nil, nil, nil, nil),
        ("50-10/7 * * * *", [5, 50, 57], nil, nil, nil, nil),
        ("55-5 * * * *", [0, 1, 2, 3, 4, 5, 55, 56, 57, 58, 59], nil, nil, nil, nil),
        ("5-5 * * * *", nil, nil, nil, nil, nil),
        ("0 0 * JAN-mar,Dec *", [0], [0], nil, [1, 2, 3, 12], nil),
        ("0 0 * dec/3 *", [0], [0], nil, [12], nil),
        ("0 0 * nov-feb *", [0], [0], nil, [1, 2, 11, 12], nil),
        ("0 0 * * MON-FRI", [0], [0], nil, nil, [1, 2, 3, 4, 5]),
        ("0 0 * * fri-mon", [0], [0], nil, nil, [0, 1, 5, 6]),
        ("0 0 * * 7", [0], [0], nil, nil, [0]),
        ("0 0 * * 1-7", [0], [0], nil, nil, nil),
        ("0 0 * * 7/2", [0], [0], nil, nil, [0, 2, 4, 6]),
        ("*,5 * * * *", nil, nil, nil, nil, nil),
        ("0 0 1-31 * mon", [0], [0], Array(1...31), nil, [1]),
        ("0 0 1-31 * *", [0], [0], nil, nil, nil),
        ("00 007 01 01 0", [0], [7], [1], [1], [0]),
        ("@hourly", [0], nil, nil, nil, nil),
        ("@daily", [0], [0], nil, nil, nil),
        ("@midnight", [0], [0], nil, nil, nil),
        ("@weekly", [0], [0], nil, nil, [0]),
        ("@monthly", [0], [0], [1], nil, nil),
        ("@YEARLY", [0], [0], [1], [1], nil),
        ("@annually", [0], [0], [1], [1], nil),
    ]

    @Test("fields expand as croniter expands them", arguments: expansions)
    func expands(_ c: (String, [Int]?, [Int]?, [Int]?, [Int]?, [Int]?)) throws {
        let e = try CronExpression(parsing: c.0)
        func v(_ f: CronField) -> [Int]? { f.isStar ? nil : f.values }
        #expect(v(e.minute) == c.1)
        #expect(v(e.hour) == c.2)
        #expect(v(e.dayOfMonth) == c.3)
        #expect(v(e.month) == c.4)
        #expect(v(e.dayOfWeek) == c.5)
    }

    @Test func dayFieldsAreOredOnlyWhenBothRestrict() throws {
        #expect(try CronExpression(parsing: "0 0 */2 * mon").daysAreOred)
        #expect(try CronExpression(parsing: "0 0 1-31 * mon").daysAreOred)
        #expect(try !CronExpression(parsing: "0 0 * * mon").daysAreOred)
        #expect(try !CronExpression(parsing: "0 0 13 * *").daysAreOred)
    }

    @Test func rebootHasNoCalendarTimes() throws {
        let e = try CronExpression(parsing: "@reboot")
        #expect(e.isReboot)
        #expect(e.nextDate(after: 0, in: TimeZone(identifier: "UTC")!) == nil)
    }

    /// (expression, column of the fault, words of the message).
    static let errors: [(String, Int, String)] = [
        ("", 1, "empty"),
        ("* * * *", 8, "expected 5 fields"),
        ("* * * * * *", 11, "found 6"),
        ("60 * * * *", 1, "out of range"),
        ("* 24 * * *", 3, "out of range"),
        ("* * 0 * *", 5, "out of range"),
        ("* * * 13 *", 7, "out of range"),
        ("* * * 0 *", 7, "out of range"),
        ("* * * * 8", 9, "out of range"),
        ("*/0 * * * *", 1, "step 0"),
        ("1,,2 * * * *", 3, "empty element"),
        ("0,-5 * * * *", 3, "negative"),
        ("5- * * * *", 1, "not a number"),
        ("* * * * mon#2", 9, "not a number or a name"),
        ("* * L * *", 5, "not a number"),
        ("* * 15W * *", 5, "not a number"),
        ("* * ? * *", 5, "not a number"),
        ("H * * * *", 1, "not a number"),
        ("mon * * * *", 1, "not a number"),
        ("* * * * jan", 9, "not a number or a name"),
        ("* * * * monday", 9, "not a number or a name"),
        ("0 0 * * 1-8", 9, "out of range"),
        ("@often", 1, "unknown macro"),
        ("  */5 * * * 9", 13, "out of range"),
    ]

    @Test("errors carry the column of the fault", arguments: errors)
    func errorPositions(_ c: (String, Int, String)) {
        #expect {
            try CronExpression(parsing: c.0)
        } throws: { error in
            guard let e = error as? CronSyntaxError else { return false }
            return e.line == 1 && e.column == c.1 && e.message.contains(c.2)
        }
    }

    @Test func syntaxErrorMapsToParseError() {
        let e = CronSyntaxError("bad", file: "cron/a.cron", line: 3, column: 7)
        #expect(e.description == "cron/a.cron:3:7: bad")
        #expect(e.parseError.code == .scriptFailed)
        #expect(e.parseError.message.contains("cron/a.cron:3:7"))
    }
}
