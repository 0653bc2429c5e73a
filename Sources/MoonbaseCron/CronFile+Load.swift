import Foundation

extension CronFile {
    /// Reads and parses one file.
    ///
    /// - Parameter path: the file's path; also the name used in errors.
    /// - Throws: `CronSyntaxError` (at 1:1 when the file cannot be read or is not UTF-8).
    public static func load(path: String) throws(CronSyntaxError) -> CronFile {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CronSyntaxError("cannot read file", file: path, line: 1, column: 1)
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw CronSyntaxError("file is not UTF-8 text", file: path, line: 1, column: 1)
        }
        return try CronFile(parsing: text, file: path)
    }

    /// Every `*.cron` file directly in `directory`, sorted by name. A missing directory holds no
    /// schedules (an app without `cron/` is fine); hidden files are skipped.
    ///
    /// - Throws: the first file's `CronSyntaxError`.
    public static func loadDirectory(_ directory: String) throws(CronSyntaxError) -> [CronFile] {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDir), isDir.boolValue else { return [] }
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            throw CronSyntaxError("cannot list directory", file: directory, line: 1, column: 1)
        }
        let base = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        var files: [CronFile] = []
        for name in names.sorted() where name.hasSuffix(".cron") && !name.hasPrefix(".") {
            files.append(try load(path: base + "/" + name))
        }
        return files
    }
}
