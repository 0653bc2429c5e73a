import MoonbaseAPI
/// A tiny command-line parser: `--name value`, `--name=value`, boolean `--flag`, positionals.
///
/// Hand-rolled because the build may use no package outside the toolchain (no swift-argument-parser); it covers
/// exactly what our verbs need and reports misuse as `UsageError` (exit 2).
public struct Arguments: Sendable {
    public private(set) var positionals: [String] = []
    private var values: [String: String] = [:]
    private var flags: Set<String> = []

    /// - Parameters:
    ///   - args: the words after the verb.
    ///   - valueOptions: options that take a value (without `--`).
    ///   - flagOptions: boolean options (without `--`).
    public init(_ args: [String], valueOptions: Set<String>, flagOptions: Set<String>) throws(UsageError) {
        var i = 0
        while i < args.count {
            let a = args[i]
            if a == "--" {
                positionals.append(contentsOf: args[(i + 1)...])
                break
            }
            if a.hasPrefix("--") && a.count > 2 {
                var name = String(a.dropFirst(2))
                var inline: String?
                if let eq = name.firstIndex(of: "=") {
                    inline = String(name[name.index(after: eq)...])
                    name = String(name[..<eq])
                }
                if flagOptions.contains(name) {
                    guard inline == nil else { throw UsageError("--\(name) takes no value") }
                    flags.insert(name)
                } else if valueOptions.contains(name) {
                    if let inline {
                        values[name] = inline
                    } else {
                        guard i + 1 < args.count else { throw UsageError("--\(name) needs a value") }
                        values[name] = args[i + 1]
                        i += 1
                    }
                } else {
                    throw UsageError("unknown option --\(name)")
                }
            } else {
                positionals.append(a)
            }
            i += 1
        }
    }

    public func value(_ name: String) -> String? { values[name] }
    public func flag(_ name: String) -> Bool { flags.contains(name) }

    public func int(_ name: String) throws(UsageError) -> Int? {
        guard let s = values[name] else { return nil }
        guard let v = Int(s), v >= 0 else { throw UsageError("--\(name) must be a non-negative integer, got '\(s)'") }
        return v
    }
}
