
#if canImport(Glibc)
import Glibc
#endif

/// The few file-system calls the host needs, over Glibc (Foundation stays out of the server).
public enum FileSystem {
    /// `mkdir -p` with mode 0700 for the data dir's folders.
    public static func makeDirectories(_ path: String, mode: mode_t = 0o755) throws(ParseError) {
        var current = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/") {
            current += "/" + part
            if mkdir(current, mode) != 0 && errno != EEXIST {
                throw ParseError.internalError("mkdir \(current): \(String(cString: strerror(errno)))")
            }
        }
    }

    public static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    public static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    public static func readFile(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, 65536) }
            if n < 0 { if errno == EINTR { continue }; return nil }
            if n == 0 { break }
            out.append(contentsOf: buf[0..<n])
        }
        return out
    }

    /// Writes atomically (temp file + rename) with the given mode.
    public static func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o644) throws(ParseError) {
        let tmp = path + ".tmp\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw ParseError.internalError("open \(tmp): \(String(cString: strerror(errno)))") }
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + off, bytes.count - off) }
            if n < 0 {
                if errno == EINTR { continue }
                close(fd)
                unlink(tmp)
                throw ParseError.internalError("write \(tmp): \(String(cString: strerror(errno)))")
            }
            off += n
        }
        fchmod(fd, mode)
        fsync(fd)
        close(fd)
        guard rename(tmp, path) == 0 else { throw ParseError.internalError("rename \(tmp): \(String(cString: strerror(errno)))") }
    }

    /// Names in a directory (no `.`/`..`), sorted.
    public static func list(_ dir: String) -> [String] {
        guard let d = opendir(dir) else { return [] }
        defer { closedir(d) }
        var names: [String] = []
        while let e = readdir(d) {
            let name = withUnsafePointer(to: e.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    public static func remove(_ path: String) -> Bool { unlink(path) == 0 }
}
