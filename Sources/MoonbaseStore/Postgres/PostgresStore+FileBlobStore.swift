import MoonbaseCore
import MoonbasePostgres

/// File metadata in `_mb_files` (made by `PostgresMigrator`). The bytes stay files in the data
/// directory's `files/`: hosts sharing one database must share that directory too.
extension PostgresStore: FileBlobStore {
    public func recordFile(name: String, contentType: String, size: Int64, createdAt: Int64) throws(ParseError) {
        try pool.withConnection { (c) throws(ParseError) in
            try c.execute("INSERT INTO _mb_files(name, contentType, size, createdAt) VALUES ($1, $2, $3, $4)",
                          [.text(name), .text(contentType), .integer(size), .integer(createdAt)])
        }
    }

    public func fileContentType(_ name: String) throws(ParseError) -> String? {
        try pool.withConnection { (c) throws(ParseError) in
            try c.execute("SELECT contentType FROM _mb_files WHERE name = $1", [.text(name)]).scalar?.string
        }
    }

    public func deleteFileRecord(_ name: String) throws(ParseError) -> Bool {
        try pool.withConnection { (c) throws(ParseError) in
            try c.execute("DELETE FROM _mb_files WHERE name = $1", [.text(name)]).affectedRows > 0
        }
    }
}
