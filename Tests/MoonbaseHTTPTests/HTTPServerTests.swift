import Glibc
import MoonbaseHTTP
import Synchronization
import Testing

@Suite("HTTP server over real sockets", .timeLimit(.minutes(1)))
struct HTTPServerTests {
    @Test func getAndPostRoundTrip() throws {
        try withServer { server, _ in
            #expect(server.port > 0)
            let c = try RawHTTPClient(port: server.port)
            let g = try c.request("GET", "/echo?a=1&b=x+y%21&c", headers: [("X-Request-Id", "abc-123_X")])
            #expect(g.status == 200)
            #expect(g.header("x-method") == "GET")
            #expect(g.header("x-path") == "/echo")
            #expect(g.header("x-raw-query") == "a=1&b=x+y%21&c")
            #expect(g.header("x-query") == "a=1;b=x y!;c=")
            #expect(g.header("x-request-id") == "abc-123_X")
            #expect(g.header("x-remote") == "127.0.0.1")
            #expect(g.header("connection")?.lowercased() != "close")

            let body = Array("{\"hello\":\"wörld\"}".utf8)
            let p = try c.request("POST", "/echo", headers: [("Content-Type", "application/json")], body: body)
            #expect(p.status == 200)
            #expect(p.body == body)
            #expect(p.header("content-type") == "text/plain")
            #expect(p.header("x-method") == "POST")
            #expect(p.header("x-request-id")?.isEmpty == false)
        }
    }

    @Test func percentDecodedPathAndBadEncoding() throws {
        try withServer { server, _ in
            let c = try RawHTTPClient(port: server.port)
            let ok = try c.request("GET", "/caf%C3%A9/a%20b+c")
            #expect(ok.header("x-path") == "/café/a b+c")
            let bad = try c.request("GET", "/bad%zz")
            #expect(bad.status == 400)
            #expect(bad.text == "{\"code\":107,\"error\":\"invalid path encoding\"}")
            #expect(bad.header("content-type") == "application/json; charset=utf-8")
            let badUTF8 = try c.request("GET", "/x%FF")
            #expect(badUTF8.status == 400)
            let badQuery = try c.request("GET", "/echo?a=%4")
            #expect(badQuery.status == 400)
            // Still the same keep-alive connection after the 400s.
            let again = try c.request("GET", "/echo")
            #expect(again.status == 200)
        }
    }

    @Test func insaneRequestIdIsReplaced() throws {
        try withServer { server, _ in
            let c = try RawHTTPClient(port: server.port)
            let r1 = try c.request("GET", "/echo", headers: [("X-Request-Id", "has space")])
            let r2 = try c.request("GET", "/echo", headers: [("X-Request-Id", String(repeating: "a", count: 65))])
            let id1 = try #require(r1.header("x-request-id"))
            let id2 = try #require(r2.header("x-request-id"))
            #expect(id1 != "has space" && RequestID.isSane(id1))
            #expect(id2.count < 65 && id1 != id2)
        }
    }

    @Test func keepAliveServesManyRequestsOnOneConnection() throws {
        try withServer { server, _ in
            let c = try RawHTTPClient(port: server.port)
            for i in 0..<20 {
                let path = i % 2 == 0 ? "/echo" : "/fast"
                let r = try c.request("POST", path, body: Array("n\(i)".utf8))
                #expect(r.status == 200)
                #expect(r.text == "n\(i)")
                #expect(r.header("connection")?.lowercased() != "close")
            }
        }
    }

    @Test func pipelinedRequestsAnswerInOrder() throws {
        try withServer { server, _ in
            let c = try RawHTTPClient(port: server.port)
            var wire: [UInt8] = []
            wire += RawHTTPClient.format("GET", "/slow?ms=30")
            wire += RawHTTPClient.format("POST", "/echo", body: Array("second".utf8))
            wire += RawHTTPClient.format("GET", "/fast?n=3")
            c.send(wire)
            let a = try c.readResponse(), b = try c.readResponse(), d = try c.readResponse()
            #expect(a.header("x-path") == "/slow")
            #expect(b.text == "second")
            #expect(d.header("x-query") == "n=3")
            #expect([a, b, d].allSatisfy { $0.status == 200 })
        }
    }

    @Test func chunkedUploadIsReassembled() throws {
        try withServer { server, _ in
            let c = try RawHTTPClient(port: server.port)
            c.send("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            var expected: [UInt8] = []
            for i in 0..<10 {
                let piece = Array(String(repeating: Character(UnicodeScalar(UInt8(97 + i))), count: 77).utf8)
                expected += piece
                c.send("\(String(piece.count, radix: 16))\r\n")
                c.send(piece)
                c.send("\r\n")
                usleep(2_000)
            }
            c.send("0\r\n\r\n")
            let r = try c.readResponse()
            #expect(r.status == 200)
            #expect(r.body == expected)
        }
    }

    @Test func expectContinueGetsInterimResponse() throws {
        try withServer { server, _ in
            let c = try RawHTTPClient(port: server.port)
            let body = Array("payload after 100".utf8)
            c.send("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: \(body.count)\r\n\r\n")
            let interim = try c.readResponse()
            #expect(interim.status == 100)
            c.send(body)
            let r = try c.readResponse()
            #expect(r.status == 200)
            #expect(r.body == body)
        }
    }

    @Test func bodyOverLimitIs413WithParseBody() throws {
        try withServer { server, _ in
            // By Content-Length, before the body is sent (with 100-continue: no 100 is sent).
            let c = try RawHTTPClient(port: server.port)
            c.send("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n")
            let r = try c.readResponse()
            #expect(r.status == 413)
            #expect(r.text.hasPrefix("{\"code\":130,\"error\":\"request entity too large"))

            // Chunked, discovered while reading.
            let c2 = try RawHTTPClient(port: server.port)
            c2.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in 0..<3 { c2.send("200\r\n" + String(repeating: "z", count: 512) + "\r\n") }
            c2.send("0\r\n\r\n")
            let r2 = try c2.readResponse()
            #expect(r2.status == 413)
            #expect(r2.text.contains("\"code\":130"))

            // The larger per-route limit accepts the same size.
            let c3 = try RawHTTPClient(port: server.port)
            let ok = try c3.request("POST", "/upload", body: [UInt8](repeating: 65, count: 3000))
            #expect(ok.status == 200 && ok.body.count == 3000)
        }
    }

    @Test func oversizedHeadersAre431WithParseBody() throws {
        try withServer { server, _ in
            let c = try RawHTTPClient(port: server.port)
            let r = try c.request("GET", "/echo", headers: [("X-Big", String(repeating: "h", count: 20_000))])
            #expect(r.status == 431)
            #expect(r.text == "{\"code\":107,\"error\":\"request headers too large\"}")
            // Just under the limit is fine.
            let c2 = try RawHTTPClient(port: server.port)
            let ok = try c2.request("GET", "/echo", headers: [("X-Big", String(repeating: "h", count: 15_000))])
            #expect(ok.status == 200)
        }
    }

    @Test func headAndErrorsAndDefaultContentType() throws {
        try withServer { server, _ in
            let c = try RawHTTPClient(port: server.port)
            let h = try c.request("HEAD", "/echo")
            #expect(h.status == 200)
            #expect(h.header("x-method") == "HEAD")
            let e = try c.request("GET", "/error")
            #expect(e.status == 404)
            #expect(e.text == "{\"code\":101,\"error\":\"object \\\"x\\\" not found\"}")
            #expect(e.header("content-type") == "application/json; charset=utf-8")
        }
    }

    @Test func fileResponsesStreamFromDisk() throws {
        let path = "/tmp/moonbase-http-test-\(getpid())-\(Int.random(in: 0..<1_000_000)).bin"
        let content = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        _ = content.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        defer { unlink(path) }
        try withServer { server, _ in
            let c = try RawHTTPClient(port: server.port)
            let r = try c.request("GET", "/file?path=\(path)")
            #expect(r.status == 200)
            #expect(r.header("content-type") == "application/octet-stream")
            #expect(r.body == content)
            let missing = try c.request("GET", "/file?path=/nonexistent/file")
            #expect(missing.status == 404)
            #expect(missing.text.contains("\"code\":101"))
        }
    }

    @Test func workerIndexIsSetOnWorkersOnly() throws {
        try withServer(HTTPServerConfig(host: "127.0.0.1", port: 0, ioThreads: 1, workers: 3)) { server, _ in
            let c = try RawHTTPClient(port: server.port)
            let w = try c.request("GET", "/echo")
            let idx = try #require(Int(w.header("x-worker") ?? ""))
            #expect((0..<3).contains(idx))
            let f = try c.request("GET", "/fast")
            #expect(f.header("x-worker") == "none")
        }
    }
}
