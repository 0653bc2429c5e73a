import MoonbaseCore
import MoonbaseCrypto
import MoonbaseHTTP
import MoonbaseSQLite

#if canImport(Glibc)
import Glibc
#endif

/// Uploaded files: bytes under `DATA/files/`, metadata in SQLite (`_mb_files`).
///
/// Names are sanitised to `[A-Za-z0-9._-]` (no leading dot, at most 128 bytes) and stored as
/// `<32 hex>_<name>`, so a name can never leave the folder (no `/`, no `..`) and two uploads of
/// the same name never collide. Thread-safe: the file system and the database are.
public final class FileStore: Sendable {
    public let dir: String
    let database: Database
    let clock: any HostClock

    public init(dir: String, database: Database, clock: any HostClock) throws(ParseError) {
        self.dir = dir
        self.database = database
        self.clock = clock
        try FileSystem.makeDirectories(dir)
        try database.write { (tx) throws(ParseError) in
            try tx.connection.execute("""
                CREATE TABLE IF NOT EXISTS _mb_files(name TEXT PRIMARY KEY, contentType TEXT NOT NULL,
                  size INTEGER NOT NULL, createdAt INTEGER NOT NULL)
                """)
        }
    }

    /// `[A-Za-z0-9._-]`: the bytes a stored file or Lua file name may hold.
    static func isSafeNameByte(_ c: UInt8) -> Bool {
        (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 46 || c == 45 || c == 95
    }

    /// A client's file name, or 122 when nothing usable is left of it.
    public static func sanitize(_ name: String) throws(ParseError) -> String {
        let allowed = name.utf8.filter(isSafeNameByte)
        var out = Array(allowed)
        while out.first == 46 { out.removeFirst() }
        guard !out.isEmpty, out.count <= 128, name.utf8.count <= 256 else {
            throw ParseError(.invalidFileName, "Filename contains invalid characters or is too long.")
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Stored names are exactly what `save` produces; anything else is refused before touching disk.
    static func isStoredName(_ name: String) -> Bool {
        let u = Array(name.utf8)
        guard u.count > 33, u.count <= 170, u[32] == 95, u.first != 46 else { return false }
        return u.allSatisfy(isSafeNameByte)
    }

    /// Saves an upload; returns the stored name.
    public func save(name: String, contentType: String, bytes: [UInt8]) throws(ParseError) -> String {
        let clean = try FileStore.sanitize(name)
        let stored = Random.hex(16) + "_" + clean
        try FileSystem.writeFile(dir + "/" + stored, bytes, mode: 0o644)
        do {
            try database.write { (tx) throws(ParseError) in
                _ = try tx.connection.run("INSERT INTO _mb_files(name, contentType, size, createdAt) VALUES (?,?,?,?)",
                                          [.text(stored), .text(contentType), .integer(Int64(bytes.count)),
                                           .integer(clock.nowMillis())])
            }
        } catch {
            _ = FileSystem.remove(dir + "/" + stored)
            throw error
        }
        return stored
    }

    /// The file's body and content type, or 101.
    public func open(_ stored: String) throws(ParseError) -> (HTTPFileBody, String) {
        guard FileStore.isStoredName(stored) else { throw ParseError(.objectNotFound, "File not found.") }
        let type = try database.read { (c) throws(ParseError) -> String? in
            if case .text(let t)? = try c.scalar("SELECT contentType FROM _mb_files WHERE name = ?", [.text(stored)]) { return t }
            return nil
        }
        guard let type else { throw ParseError(.objectNotFound, "File not found.") }
        do {
            return (try HTTPFileBody.open(path: dir + "/" + stored), type)
        } catch {
            throw ParseError(.objectNotFound, "File not found.")
        }
    }

    /// Deletes a stored file; false when there was none.
    @discardableResult
    public func delete(_ stored: String) throws(ParseError) -> Bool {
        guard FileStore.isStoredName(stored) else { return false }
        let n = try database.write { (tx) throws(ParseError) -> Int in
            try tx.connection.run("DELETE FROM _mb_files WHERE name = ?", [.text(stored)])
        }
        let removed = FileSystem.remove(dir + "/" + stored)
        return n > 0 || removed
    }
}
