import MoonbaseCore
import MoonbaseSQLite

/// File metadata in `_mb_files` (made by `Migrator`).
extension SQLiteDocumentStore: FileBlobStore {
    public func recordFile(name: String, contentType: String, size: Int64, createdAt: Int64) throws(ParseError) {
        try database.write { (tx) throws(ParseError) in
            _ = try tx.connection.run("INSERT INTO _mb_files(name, contentType, size, createdAt) VALUES (?,?,?,?)",
                                      [.text(name), .text(contentType), .integer(size), .integer(createdAt)])
        }
    }

    public func fileContentType(_ name: String) throws(ParseError) -> String? {
        try database.read { (c) throws(ParseError) -> String? in
            if case .text(let t)? = try c.scalar("SELECT contentType FROM _mb_files WHERE name = ?", [.text(name)]) { return t }
            return nil
        }
    }

    public func deleteFileRecord(_ name: String) throws(ParseError) -> Bool {
        try database.write { (tx) throws(ParseError) -> Int in
            try tx.connection.run("DELETE FROM _mb_files WHERE name = ?", [.text(name)])
        } > 0
    }
}
