import MoonbaseAPI
import MoonbaseCore

#if canImport(Glibc)
import Glibc
#endif

/// `moonbase deploy PATH --server URL [--master-key KEY]`: PUTs each Lua file to
/// `/admin/functions/FILE` (modules of a folder's `lib/` to `/admin/functions/lib/FILE`, first); the server loads the new generation before it writes the file, so a
/// file that fails to load is refused with its file:line and nothing changes.
enum DeployCommand {
    static func run(_ args: [String]) throws -> Int32 {
        guard let (a, c) = try Commands.parse(args, values: ["server", "master-key"],
                                              help: "usage: moonbase deploy PATH --server http://HOST:PORT [--master-key KEY]")
        else { return 0 }
        guard let path = a.positionals.first else { throw UsageError("deploy needs a file or folder") }
        guard let server = a.value("server") else { throw UsageError("deploy needs --server URL") }
        guard let key = a.value("master-key") ?? c.masterKey ?? FileSystem.readFile(c.masterKeyPath).map({ String(decoding: $0, as: UTF8.self).trimmingWhitespace() }) else {
            throw UsageError("no master key: pass --master-key or set MOONBASE_MASTER_KEY")
        }
        // Modules (`lib/*.lua`) first: a file may require a module deployed in the same run.
        let files: [(String, String)] = FileSystem.isDirectory(path)
            ? FileSystem.list(path + "/lib").filter { $0.hasSuffix(".lua") }.map { ("lib/" + $0, path + "/lib/" + $0) }
                + FileSystem.list(path).filter { $0.hasSuffix(".lua") }.map { ($0, path + "/" + $0) }
            : [(String(path.split(separator: "/").last ?? Substring(path)), path)]
        guard !files.isEmpty else { throw UsageError("no .lua files at \(path)") }
        var failed = 0
        for (name, p) in files {
            guard let body = FileSystem.readFile(p) else { throw ParseError.internalError("cannot read \(p)") }
            let (status, text) = try SimpleHTTPClient.request(url: server + "/admin/functions/" + name, method: "PUT", body: body,
                                                              headers: [("X-Parse-Master-Key", key), ("X-Parse-Application-Id", c.appId),
                                                                        ("Content-Type", "text/x-lua")])
            if status == 200 {
                print("deployed \(name)")
            } else {
                printErr("\(name): HTTP \(status): \(text)")
                failed += 1
            }
        }
        return failed == 0 ? 0 : 1
    }
}

/// A minimal HTTP/1.1 client for `deploy` (plain http, one request per connection). Hand-rolled
/// because FoundationNetworking would pull libcurl into the server binary for one CLI verb.
enum SimpleHTTPClient {
    static func request(url: String, method: String, body: [UInt8], headers: [(String, String)]) throws -> (Int, String) {
        guard url.hasPrefix("http://") else { throw UsageError("only http:// URLs are supported") }
        let rest = url.dropFirst(7)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let hostPort = String(rest[..<slash])
        let path = slash == rest.endIndex ? "/" : String(rest[slash...])
        let parts = hostPort.split(separator: ":")
        let host = String(parts.first ?? "127.0.0.1")
        let port = parts.count > 1 ? String(parts[1]) : "80"
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, port, &hints, &res) == 0, let ai = res else { throw UsageError("cannot resolve \(host)") }
        defer { freeaddrinfo(res) }
        let fd = socket(ai.pointee.ai_family, ai.pointee.ai_socktype, ai.pointee.ai_protocol)
        guard fd >= 0, connect(fd, ai.pointee.ai_addr, ai.pointee.ai_addrlen) == 0 else {
            throw ParseError.internalError("cannot connect to \(hostPort)")
        }
        defer { close(fd) }
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(hostPort)\r\nConnection: close\r\nContent-Length: \(body.count)\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        head += "\r\n"
        let out = Array(head.utf8) + body
        var off = 0
        while off < out.count {
            let n = out.withUnsafeBytes { send(fd, $0.baseAddress! + off, out.count - off, 0) }
            guard n > 0 else { throw ParseError.internalError("send failed") }
            off += n
        }
        var resp = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, 65536, 0) }
            if n <= 0 { break }
            resp.append(contentsOf: buf[0..<n])
        }
        let text = String(decoding: resp, as: UTF8.self)
        let status = Int(text.split(separator: " ").dropFirst().first ?? "") ?? 0
        // The body is everything after the first blank line (Foundation stays out of the binary's
        // own code; `components(separatedBy:)` only leaked in through another module's import).
        let bodyText = text.firstRange(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
        return (status, bodyText)
    }
}
