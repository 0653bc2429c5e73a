import MoonbaseCore
import MoonbaseCrypto
import MoonbaseHTTP
import MoonbaseStore

#if canImport(Glibc)
import Glibc
#endif

/// Uploaded files: bytes under `DATA/files/`, metadata in the store (`FileBlobStore`).
///
/// Names are sanitised to `[A-Za-z0-9._-]` (no leading dot, at most 128 bytes) and stored as
/// `<32 hex>_<name>`, so a name can never leave the folder (no `/`, no `..`) and two uploads of
/// the same name never collide. Thread-safe: the file system and the store are.
public final class FileStore: Sendable {
    public let dir: String
    let store: any FileBlobStore
    let clock: any HostClock

    public init(dir: String, store: any FileBlobStore, clock: any HostClock) throws(ParseError) {
        self.dir = dir
        self.store = store
        self.clock = clock
        try FileSystem.makeDirectories(dir)
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
            try store.recordFile(name: stored, contentType: contentType, size: Int64(bytes.count), createdAt: clock.nowMillis())
        } catch {
            _ = FileSystem.remove(dir + "/" + stored)
            throw error
        }
        return stored
    }

    /// The file's body and content type, or 101.
    public func open(_ stored: String) throws(ParseError) -> (HTTPFileBody, String) {
        guard FileStore.isStoredName(stored) else { throw ParseError(.objectNotFound, "File not found.") }
        guard let type = try store.fileContentType(stored) else { throw ParseError(.objectNotFound, "File not found.") }
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
        let recorded = try store.deleteFileRecord(stored)
        let removed = FileSystem.remove(dir + "/" + stored)
        return recorded || removed
    }
}
