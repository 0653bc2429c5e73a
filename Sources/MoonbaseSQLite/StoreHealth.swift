import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Disk-full episodes: the first write refused for lack of space logs one warning and puts
/// `read-only` on the health board; the episode ends (one info line, health back to ok) with
/// the next successful commit, or when the health probe finds space free again (a node taken
/// out of a load balancer gets no writes to prove it). Writes are never blocked by this state:
/// each one simply tries again, so they resume by themselves when space returns.
///
/// Thread-safety: the flag is atomic; the path is guarded by a mutex.
public final class StoreHealth: Sendable {
    public static let shared = StoreHealth()

    private let full = Atomic<Bool>(false)
    private let dir = Mutex<String>("")
    /// Free space above which the probe ends an episode without waiting for a write.
    static let recoveredBytes: UInt64 = 8 << 20

    /// True during a disk-full episode.
    public var isDiskFull: Bool { full.load(ordering: .relaxed) }

    func diskFull(path: String) {
        guard !full.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let d = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        dir.withLock { $0 = d.isEmpty ? "/" : d }
        Log.warn("store: database or disk is full (\(d)); writes are refused with 503 until space is freed, reads continue")
        HealthBoard.shared.register("store") { [self] in
            guard full.load(ordering: .relaxed) else { return nil }
            if freeBytes() >= StoreHealth.recoveredBytes {
                end("space is free again")
                return nil
            }
            return HealthProblem(status: "read-only", fields: [("reason", "\"disk full\"")])
        }
    }

    @inline(__always)
    func writeSucceeded() {
        if full.load(ordering: .relaxed) { end("a write succeeded") }
    }

    private func end(_ why: String) {
        guard full.exchange(false, ordering: .acquiringAndReleasing) else { return }
        Log.info("store: disk-full episode over (\(why)); writes resume")
    }

    private func freeBytes() -> UInt64 {
        var st = statvfs()
        let d = dir.withLock { $0 }
        guard statvfs(d, &st) == 0 else { return 0 }
        return UInt64(st.f_bavail) * UInt64(st.f_frsize)
    }
}
