import MoonbaseCore

/// A cron expression or `.cron` file that cannot be loaded, with the position of the fault.
///
/// `line` and `column` are 1-based. For a bare expression (`CronExpression(parsing:)`) the line is
/// 1 and the column counts characters of the expression text; `CronFile` reports positions in
/// the file and sets `file`. Mapped to a `ParseError` at the module edge (`parseError`).
public struct CronSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, without the position (e.g. `value 61 out of range 0-59 in minute field`).
    public var message: String
    /// The file the text came from, if any (e.g. `cron/cleanup.cron`).
    public var file: String?
    /// 1-based line.
    public var line: Int
    /// 1-based column (in characters).
    public var column: Int

    public init(_ message: String, file: String? = nil, line: Int = 1, column: Int = 1) {
        self.message = message
        self.file = file
        self.line = line
        self.column = column
    }

    /// `file:line:column: message` (or `line:column: message` without a file).
    public var description: String {
        if let file { return "\(file):\(line):\(column): \(message)" }
        return "\(line):\(column): \(message)"
    }

    /// The same error placed inside a file: on `line`, with the column moved right by
    /// `columnOffset` (where the expression starts on that line, minus one).
    func shifted(file: String?, line: Int, columnOffset: Int) -> CronSyntaxError {
        CronSyntaxError(message, file: file, line: line, column: column + columnOffset)
    }

    /// The Parse error clients and `moonbase check` see: code 141 (a Cloud Code load failure),
    /// the message carrying `file:line:column`.
    public var parseError: ParseError {
        ParseError(.scriptFailed, "cron: \(description)")
    }
}
