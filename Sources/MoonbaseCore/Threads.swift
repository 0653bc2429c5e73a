#if canImport(Glibc)
import Glibc
#endif

/// Starts a detached pthread running `body` (our own background threads: the checkpointer, the
/// realtime delivery and housekeeping threads). A pthread rather than a libdispatch queue: these
/// threads block for long stretches on their own condition variables, and a thread created here
/// inherits the creator's signal mask and nice value like any pthread. Returns false, having
/// released `body`, when the thread could not be created.
@discardableResult
public func spawnThread(_ body: @escaping @Sendable () -> Void) -> Bool {
    final class Box: Sendable {
        let run: @Sendable () -> Void
        init(_ r: @escaping @Sendable () -> Void) { run = r }
    }
    let box = Unmanaged.passRetained(Box(body)).toOpaque()
    var tid = pthread_t()
    guard pthread_create(&tid, nil, { arg in
        Unmanaged<Box>.fromOpaque(arg!).takeRetainedValue().run()
        return nil
    }, box) == 0 else {
        Unmanaged<Box>.fromOpaque(box).release()
        return false
    }
    pthread_detach(tid)
    return true
}
