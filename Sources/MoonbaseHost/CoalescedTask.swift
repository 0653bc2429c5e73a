import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Runs `work` on a thread of its own when asked, never two at once; asks that arrive while it
/// runs make it run once more afterwards. For work that loads "the latest state" (a deployed
/// bundle), asked from a thread that must not wait for it (the store's listening thread).
final class CoalescedTask: Sendable {
    private let state = Mutex<(running: Bool, again: Bool)>((false, false))
    private let work: @Sendable () -> Void

    init(_ work: @escaping @Sendable () -> Void) { self.work = work }

    func request() {
        let start = state.withLock { s -> Bool in
            if s.running { s.again = true; return false }
            s.running = true
            return true
        }
        guard start else { return }
        let box = Unmanaged.passRetained(self).toOpaque()
        var tid = pthread_t()
        if pthread_create(&tid, nil, { arg in
            Unmanaged<CoalescedTask>.fromOpaque(arg!).takeRetainedValue().loop()
            return nil
        }, box) != 0 {
            Unmanaged<CoalescedTask>.fromOpaque(box).release()
            state.withLock { $0.running = false }
            work()  // no thread to be had: run it here rather than not at all
            return
        }
        pthread_detach(tid)
    }

    private func loop() {
        repeat { work() } while state.withLock { s -> Bool in
            if s.again { s.again = false; return true }
            s.running = false
            return false
        }
    }
}
