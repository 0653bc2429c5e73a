import Glibc
import MoonbaseHTTP
import Synchronization

/// A gate a handler blocks on until the test opens it (no sleeps to "probably" order events).
final class Gate: Sendable {
    private let open = Atomic<Bool>(false)
    private let arrivals = Atomic<Int>(0)
    func pass() {
        arrivals.add(1, ordering: .relaxed)
        while !open.load(ordering: .acquiring) { usleep(1_000) }
    }
    func release() { open.store(true, ordering: .releasing) }
    /// Handlers that reached `pass()` so far.
    var arrived: Int { arrivals.load(ordering: .relaxed) }
    /// Waits until `n` handlers are blocked in `pass()` (up to 10 s).
    func waitForArrivals(_ n: Int) -> Bool {
        for _ in 0..<10_000 {
            if arrivals.load(ordering: .relaxed) >= n { return true }
            usleep(1_000)
        }
        return false
    }
}

/// The handler under test. Routes:
/// - `/echo`: echoes the body; method, path, query and worker index in `X-*` headers.
/// - `/fast`: answered inline on the I/O thread (`X-Thread` names the thread).
/// - `/slow?ms=N`: sleeps N ms on a worker.
/// - `/gate`: blocks on the gate until the test releases it (`?size=N`: then answers N bytes).
/// - any path with `?cpu`: CPU-bound (`cpuBound`).
/// - `/file?path=P`: streams the file.
/// - `/upload...`: 4 KiB body limit (others 1 KiB).
/// - `/batch`: through the batch lane (`?gate`: its batch blocks on the gate).
struct TestHandler: HTTPHandler {
    let gate = Gate()

    func bodyLimit(method: String, path: String) -> Int {
        path.hasPrefix("/upload") ? 4096 : 1024
    }

    func runsInline(_ request: HTTPRequest) -> Bool { request.path == "/fast" }

    /// `?cpu` marks a request CPU-bound (it waits for a CPU slot).
    func cpuBound(_ request: HTTPRequest) -> Bool { request.queryValue("cpu") != nil }

    /// `/batch` requests go through the batch lane; a batch holding one with `?gate` blocks on
    /// the gate first. Each answer echoes its body with the size of its batch (`X-Batch-Size`).
    func batches(_ request: HTTPRequest) -> Bool { request.path == "/batch" }

    func handleBatch(_ requests: [HTTPRequest]) -> [HTTPResponse] {
        if requests.contains(where: { $0.queryValue("gate") != nil }) { gate.pass() }
        return requests.map {
            HTTPResponse(status: 200, headers: [("X-Batch-Size", "\(requests.count)"), ("Content-Type", "text/plain")],
                         body: $0.body)
        }
    }

    func handle(_ r: HTTPRequest) -> HTTPResponse {
        var h: [(String, String)] = [
            ("X-Method", r.method),
            ("X-Path", r.path),
            ("X-Raw-Query", r.rawQuery),
            ("X-Query", r.query.map { "\($0.0)=\($0.1)" }.joined(separator: ";")),
            ("X-Worker", HTTPServer.currentWorkerIndex.map(String.init) ?? "none"),
            ("X-Thread", String(UInt(pthread_self()))),
            ("X-Remote", r.remoteAddress),
        ]
        if let ua = r.header("x-test") { h.append(("X-Echo-Test", ua)) }
        switch r.path {
        case "/slow":
            let ms = Int(r.queryValue("ms") ?? "100") ?? 100
            usleep(UInt32(ms * 1000))
        case "/gate":
            gate.pass()
            if let n = r.queryValue("size").flatMap({ Int($0) }) {
                return HTTPResponse(status: 200, headers: h + [("Content-Type", "text/plain")],
                                    body: [UInt8](repeating: UInt8(ascii: "x"), count: n))
            }
        case "/file":
            do {
                let f = try HTTPFileBody.open(path: r.queryValue("path") ?? "")
                return .file(200, f, contentType: "application/octet-stream", headers: h)
            } catch {
                return .error(error)
            }
        case "/error":
            return .parseError(status: 404, code: .objectNotFound, message: "object \"x\" not found")
        default:
            break
        }
        return HTTPResponse(status: 200, headers: h + [("Content-Type", "text/plain")], body: r.body)
    }
}

/// Starts a server on 127.0.0.1, port 0, and stops it after `body`.
func withServer(_ config: HTTPServerConfig = HTTPServerConfig(host: "127.0.0.1", port: 0, ioThreads: 2, workers: 2),
                handler: TestHandler = TestHandler(),
                _ body: (HTTPServer, TestHandler) throws -> Void) throws {
    var cfg = config
    cfg.port = 0
    let server = try HTTPServer(config: cfg, handler: handler)
    try server.start()
    defer { server.shutdown(graceMillis: 2_000) }
    try body(server, handler)
}

func monotonicMillis() -> Int {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// Runs `work` on its own pthread; `join()` waits for it.
final class Background: @unchecked Sendable {
    // @unchecked: `thread` is written once in init before anyone can call `join()`; `work`
    // is immutable.
    private var thread = pthread_t()
    private let work: () -> Void
    init(_ work: @escaping () -> Void) {
        self.work = work
        let ctx = Unmanaged.passRetained(self).toOpaque()
        pthread_create(&thread, nil, { raw in
            let me = Unmanaged<Background>.fromOpaque(raw!).takeRetainedValue()
            me.work()
            return nil
        }, ctx)
    }
    func join() { pthread_join(thread, nil) }
}

/// A shareable atomic counter (an `Atomic` itself cannot be captured by escaping closures).
final class Counter: Sendable {
    private let v = Atomic<Int>(0)
    func add(_ n: Int = 1) { v.add(n, ordering: .acquiringAndReleasing) }
    var value: Int { v.load(ordering: .acquiring) }
}
