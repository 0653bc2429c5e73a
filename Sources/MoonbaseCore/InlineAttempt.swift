#if canImport(Glibc)
import Glibc
#endif

/// A request started on an HTTP I/O thread must never wait there: every connection of that
/// thread would wait with it. Work that would have to wait (the database writer held by a long
/// transaction, a checkpoint due, a trigger to run) throws `continuesOnWorker` instead; the
/// request's start is undone (its transaction rolls back, its quota unit is given back, nothing
/// is logged) and a worker runs the request from the beginning.
public enum InlineAttempt {
    private static let key: pthread_key_t = {
        var k = pthread_key_t()
        pthread_key_create(&k, nil)
        return k
    }()

    /// True on an I/O thread running a request's start.
    public static var active: Bool { pthread_getspecific(key) != nil }

    /// Runs `body` as a request's start on an I/O thread (`active` is true inside).
    public static func running<T>(_ body: () -> T) -> T {
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: 1))
        defer { pthread_setspecific(key, nil) }
        return body()
    }

    /// Thrown by work that cannot finish on an I/O thread without waiting.
    public static let continuesOnWorker = ParseError(.internalError, "the request continues on a worker",
                                                     underlying: marker)
    static let marker = "attempt: continues on a worker"

    /// True for `continuesOnWorker`.
    public static func isContinuesOnWorker(_ e: ParseError) -> Bool { e.underlying == marker }
}
