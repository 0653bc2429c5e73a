import Foundation
import MoonbaseCore
import MoonbasePostgres
import Synchronization
import Testing

/// One throw-away PostgreSQL 15 cluster per test run (tests/pg/cluster.sh), started before the
/// first test of `PostgresSuite` and stopped after the last one, also when tests fail. The
/// script's watcher stops it if this process dies first.
struct PGClusterTrait: SuiteTrait, TestScoping {
    var isRecursive: Bool { false }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        let cluster = try PGTestCluster.start()
        defer { cluster.stop() }
        try await PGTestCluster.$current.withValue(cluster) { try await function() }
    }
}

extension Trait where Self == PGClusterTrait {
    static var pgCluster: Self { Self() }
}

/// Every PostgreSQL test lives in an extension of this suite, so they share the cluster. Run
/// one at a time: a few need to be alone on the server (connection counts, terminations).
@Suite(.pgCluster, .serialized, .timeLimit(.minutes(3)))
struct PostgresSuite {}

final class PGTestCluster: Sendable {
    @TaskLocal static var current: PGTestCluster?

    let directory: String
    let url: String

    private init(directory: String, url: String) {
        self.directory = directory
        self.url = url
    }

    /// The URL of the run's cluster (fails the test when called outside `PostgresSuite`).
    static var url: String {
        guard let c = current else {
            Issue.record("not inside PostgresSuite: no cluster")
            return "postgres://invalid"
        }
        return c.url
    }

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../tests/pg/cluster.sh").standardizedFileURL.path

    static func start() throws -> PGTestCluster {
        // Directly under /tmp (world-traversable), not $TMPDIR: as root the server runs as
        // nobody, who must reach the directory; and the socket path must stay short.
        let dir = "/tmp/mb-pg-\(UUID().uuidString.prefix(8))"
        let out = try run(["start", dir, String(getpid())])
        guard let url = out.split(separator: "\n").last.map(String.init), url.hasPrefix("postgres://") else {
            throw ParseError.internalError("cluster.sh printed no URL: \(out)")
        }
        return PGTestCluster(directory: dir, url: url)
    }

    func stop() {
        _ = try? PGTestCluster.run(["stop", directory])
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs the script with posix_spawn and returns its standard output. (Foundation's
    /// `Process.waitUntilExit` was seen to hang inside a swift-testing scope.)
    @discardableResult
    static func run(_ args: [String]) throws -> String {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw ParseError.internalError("pipe failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        posix_spawn_file_actions_addclose(&actions, fds[0])
        posix_spawn_file_actions_addclose(&actions, fds[1])
        let argv: [UnsafeMutablePointer<CChar>?] = (["/bin/bash", script] + args).map { strdup($0) } + [nil]
        defer { for a in argv { free(a) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, "/bin/bash", &actions, nil, argv, environ)
        close(fds[1])
        guard rc == 0 else {
            close(fds[0])
            throw ParseError.internalError("posix_spawn failed: \(rc)")
        }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fds[0], &buf, buf.count)
            if n > 0 { out += buf[0..<n] } else if n == 0 || errno != EINTR { break }
        }
        close(fds[0])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = String(decoding: out, as: UTF8.self)
        // WIFEXITED && WEXITSTATUS == 0
        guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
            throw ParseError.internalError("cluster.sh \(args.first ?? "") failed (status \(status)): \(text)")
        }
        return text
    }
}

/// A table name no other test uses.
func uniqueTable(_ prefix: String = "t") -> String {
    "\(prefix)_\(UUID().uuidString.prefix(8).lowercased())"
}

/// Polls `condition` every 20 ms until it holds or `seconds` pass; true when it held.
func eventually(seconds: Double = 15, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}

/// Runs `body` on a new thread (not a Swift concurrency worker: transactions are per thread).
func onThread(_ body: @escaping @Sendable () -> Void) -> DispatchGroup {
    let g = DispatchGroup()
    g.enter()
    Thread.detachNewThread {
        body()
        g.leave()
    }
    return g
}

/// A value shared with escaping closures and other threads (a `Mutex` cannot be captured).
final class Locked<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: T

    init(_ value: T) { self.value = value }

    var get: T { lock.withLock { value } }

    func update<R>(_ body: (inout T) -> R) -> R { lock.withLock { body(&value) } }
}
