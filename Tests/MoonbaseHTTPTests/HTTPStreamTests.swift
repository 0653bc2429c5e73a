import Glibc
import MoonbaseHTTP
import Synchronization
import Testing

/// A handler whose `/stream` answers with a streaming body the test feeds.
final class StreamHandler: HTTPHandler, @unchecked Sendable {
    // @unchecked: `streams` is behind its mutex.
    let streams = Mutex<[HTTPStreamBody]>([])
    let closes = Atomic<Int>(0)

    func handle(_ r: HTTPRequest) -> HTTPResponse {
        let s = HTTPStreamBody(maxBuffered: 64)
        s.onClose { [unowned self] in self.closes.add(1, ordering: .relaxed) }
        streams.withLock { $0.append(s) }
        var resp = HTTPResponse(status: 200, headers: [("Content-Type", "text/plain")])
        resp.stream = s
        return resp
    }

    func waitForStream(_ n: Int) -> HTTPStreamBody? {
        for _ in 0..<5_000 {
            if let s = streams.withLock({ $0.count >= n ? $0[n - 1] : nil }) { return s }
            usleep(1_000)
        }
        return nil
    }
}

/// Reads what arrives on `fd` within `ms` milliseconds.
func readAvailable(_ fd: Int32, ms: Int) -> String {
    var out: [UInt8] = []
    let deadline = monotonicMillis() + ms
    var buf = [UInt8](repeating: 0, count: 4096)
    while monotonicMillis() < deadline {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, 20) > 0 else { continue }
        let n = recv(fd, &buf, buf.count, 0)
        if n <= 0 { break }
        out += buf[0..<n]
    }
    return String(decoding: out, as: UTF8.self)
}

@Suite(.timeLimit(.minutes(1)))
struct HTTPStreamTests {
    @Test func bytesFlowAsTheyAreWrittenAndTheEndIsSent() throws {
        let h = StreamHandler()
        let server = try HTTPServer(config: HTTPServerConfig(host: "127.0.0.1", port: 0, ioThreads: 1, workers: 1), handler: h)
        try server.start()
        defer { server.shutdown(graceMillis: 2_000) }
        let c = try RawHTTPClient(port: server.port)
        c.send(RawHTTPClient.format("GET", "/stream"))
        let s = try #require(h.waitForStream(1))
        let head = readAvailable(c.fd, ms: 300)
        #expect(head.hasPrefix("HTTP/1.1 200") && head.lowercased().contains("transfer-encoding: chunked"))
        #expect(s.write(Array("first".utf8)))
        #expect(readAvailable(c.fd, ms: 500).contains("first"))   // delivered before anything else is written
        #expect(s.write(Array("second".utf8)))
        #expect(readAvailable(c.fd, ms: 500).contains("second"))
        // Bounded: a write beyond the buffer is refused, not queued.
        #expect(!s.write([UInt8](repeating: 65, count: 65)))
        s.finish()
        #expect(readAvailable(c.fd, ms: 500).contains("0\r\n\r\n"))
        for _ in 0..<2_000 where h.closes.load(ordering: .relaxed) == 0 { usleep(1_000) }
        #expect(h.closes.load(ordering: .relaxed) == 1)
        #expect(!s.write(Array("late".utf8)))
    }

    @Test func shutdownEndsOpenStreams() throws {
        let h = StreamHandler()
        let server = try HTTPServer(config: HTTPServerConfig(host: "127.0.0.1", port: 0, ioThreads: 1, workers: 1), handler: h)
        try server.start()
        let c = try RawHTTPClient(port: server.port)
        c.send(RawHTTPClient.format("GET", "/stream"))
        _ = try #require(h.waitForStream(1))
        _ = readAvailable(c.fd, ms: 200)
        let t0 = monotonicMillis()
        server.shutdown(graceMillis: 5_000)  // the stream is suspended (empty): it must be ended, not waited for
        #expect(monotonicMillis() - t0 < 3_000)
        #expect(h.closes.load(ordering: .relaxed) == 1)
    }
}
