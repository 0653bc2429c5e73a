#if canImport(Glibc)
import Glibc
#endif

/// Whose per-worker resources (the Lua VM above all) the calling thread uses.
///
/// A worker thread has a seat of its own for its whole life (a number unique to that thread,
/// never reused). An HTTP I/O thread may borrow the seat of a worker that the pool reserved for
/// it while the worker is parked: it then runs a request's start on that worker's VM, and the
/// worker finishes it if it cannot be done within a short budget. The pool guarantees that a
/// borrowed seat's worker runs nothing meanwhile, so a VM is still used by one thread at a time.
public enum WorkerSeat {
    private static let ownKey = makeKey()
    private static let borrowedKey = makeKey()

    private static func makeKey() -> pthread_key_t {
        var k = pthread_key_t()
        pthread_key_create(&k, nil)
        return k
    }

    /// The calling worker thread's own seat (nil off the worker pool).
    public static var own: Int? {
        guard let p = pthread_getspecific(ownKey) else { return nil }
        return Int(bitPattern: p) - 1
    }

    /// Sets the calling thread's own seat (the pool does it once per worker thread).
    public static func setOwn(_ seat: Int) {
        pthread_setspecific(ownKey, UnsafeRawPointer(bitPattern: seat + 1))
    }

    /// The seat the calling thread borrowed (nil when it borrowed none).
    public static var borrowed: Int? {
        guard let p = pthread_getspecific(borrowedKey) else { return nil }
        return Int(bitPattern: p) - 1
    }

    /// Runs `body` with `seat` borrowed by the calling thread.
    public static func borrowing<T>(_ seat: Int, _ body: () -> T) -> T {
        pthread_setspecific(borrowedKey, UnsafeRawPointer(bitPattern: seat + 1))
        defer { pthread_setspecific(borrowedKey, nil) }
        return body()
    }
}
