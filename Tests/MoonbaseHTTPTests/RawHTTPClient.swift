import Glibc

/// One parsed HTTP response as read off the socket.
struct RawResponse {
    var status: Int
    var headers: [(String, String)]
    var body: [UInt8]

    func header(_ name: String) -> String? {
        let n = name.lowercased()
        for (k, v) in headers where k == n { return v }
        return nil
    }

    var text: String { String(decoding: body, as: UTF8.self) }
}

enum RawClientError: Error, CustomStringConvertible {
    case connect(Int32), closed, timeout, malformed(String)
    var description: String {
        switch self {
        case .connect(let e): return "connect failed errno \(e)"
        case .closed: return "connection closed"
        case .timeout: return "read timed out"
        case .malformed(let s): return "malformed response: \(s)"
        }
    }
}

/// A tiny blocking HTTP/1.1 client over a raw TCP socket: just enough to test keep-alive,
/// pipelining, chunked uploads, 100-continue and limits exactly (no URLSession).
final class RawHTTPClient {
    let fd: Int32
    private var buffer: [UInt8] = []

    convenience init(port: Int, timeoutSeconds: Int = 10) throws {
        try self.init(socket: socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0), port: port, timeoutSeconds: timeoutSeconds)
    }

    /// `n` clients whose sockets are all created before the first connects: the server's
    /// descriptors for them are then not interleaved with these (the server runs in this process).
    static func connectAll(_ n: Int, port: Int) throws -> [RawHTTPClient] {
        let fds = (0..<n).map { _ in socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0) }
        var clients: [RawHTTPClient] = []
        for (i, fd) in fds.enumerated() {
            do {
                clients.append(try RawHTTPClient(socket: fd, port: port, timeoutSeconds: 10))
            } catch {
                for rest in fds[(i + 1)...] { close(rest) }
                throw error
            }
        }
        return clients
    }

    private init(socket: Int32, port: Int, timeoutSeconds: Int) throws {
        fd = socket
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if rc != 0 {
            let e = errno
            close(fd)
            throw RawClientError.connect(e)
        }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var tv = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) {
        var off = 0
        while off < bytes.count {
            let n = bytes[off...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            off += n
        }
    }

    func send(_ text: String) { send(Array(text.utf8)) }

    /// True once the server has closed or reset the connection (a non-blocking peek).
    func peerClosed() -> Bool {
        var b: UInt8 = 0
        let n = recv(fd, &b, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        if n == 0 { return true }
        return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK
    }

    /// Sends a request with Content-Length (when a body is given) and reads the response.
    func request(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil) throws -> RawResponse {
        send(RawHTTPClient.format(method, target, headers: headers, body: body))
        return try readResponse(head: method == "HEAD")
    }

    static func format(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil) -> [UInt8] {
        var s = "\(method) \(target) HTTP/1.1\r\nHost: localhost\r\n"
        for (k, v) in headers { s += "\(k): \(v)\r\n" }
        if let body { s += "Content-Length: \(body.count)\r\n" }
        s += "\r\n"
        return Array(s.utf8) + (body ?? [])
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n == 0 { throw RawClientError.closed }
        if n < 0 { throw errno == EAGAIN || errno == EWOULDBLOCK ? RawClientError.timeout : RawClientError.closed }
        buffer.append(contentsOf: chunk[0..<n])
    }

    private func readLine() throws -> String {
        while true {
            if let i = indexOfCRLF() {
                let line = String(decoding: buffer[0..<i], as: UTF8.self)
                buffer.removeFirst(i + 2)
                return line
            }
            try fill()
        }
    }

    private func indexOfCRLF() -> Int? {
        guard buffer.count >= 2 else { return nil }
        for i in 0..<(buffer.count - 1) where buffer[i] == 13 && buffer[i + 1] == 10 { return i }
        return nil
    }

    private func readExactly(_ n: Int) throws -> [UInt8] {
        while buffer.count < n { try fill() }
        let out = Array(buffer[0..<n])
        buffer.removeFirst(n)
        return out
    }

    /// Reads one response (an interim `100 Continue` counts as one).
    func readResponse(head: Bool = false) throws -> RawResponse {
        let statusLine = try readLine()
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw RawClientError.malformed(statusLine)
        }
        var headers: [(String, String)] = []
        while true {
            let line = try readLine()
            if line.isEmpty { break }
            guard let colon = line.firstIndex(of: ":") else { throw RawClientError.malformed(line) }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].drop(while: { $0 == " " })
            headers.append((name, String(value)))
        }
        var r = RawResponse(status: status, headers: headers, body: [])
        if status == 100 || status == 204 || status == 304 || head { return r }
        if let cl = r.header("content-length"), let n = Int(cl) {
            r.body = try readExactly(n)
        } else if r.header("transfer-encoding")?.lowercased() == "chunked" {
            while true {
                let sizeLine = try readLine()
                guard let n = Int(sizeLine.split(separator: ";")[0], radix: 16) else { throw RawClientError.malformed(sizeLine) }
                if n == 0 {
                    while try !readLine().isEmpty {}
                    break
                }
                r.body += try readExactly(n)
                _ = try readLine()
            }
        } else {
            while true {
                do { try fill() } catch RawClientError.closed { break }
            }
            r.body = buffer
            buffer = []
        }
        return r
    }

    /// True if the server closed the connection (reads EOF within the timeout).
    func isClosedByPeer() -> Bool {
        do {
            try fill()
            return false
        } catch RawClientError.closed {
            return true
        } catch {
            return false
        }
    }
}
