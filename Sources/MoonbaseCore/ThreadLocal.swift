#if canImport(Glibc)
import Glibc
#endif

/// A per-thread slot over `pthread_key_create` (Swift has no thread-local declarations).
///
/// Thread-safety: the key itself is immutable after init; each thread only ever sees its own
/// value, so sharing the `ThreadLocal` across threads is safe (`@unchecked Sendable`).
public final class ThreadLocal<T: AnyObject>: @unchecked Sendable {
    private var key = pthread_key_t()
    private let make: @Sendable () -> T

    public init(_ make: @escaping @Sendable () -> T) {
        self.make = make
        // The destructor releases the retained value when the thread exits.
        pthread_key_create(&key) { raw in
            if let raw { Unmanaged<AnyObject>.fromOpaque(raw).release() }
        }
    }

    /// This thread's value, created on first use.
    public var value: T {
        if let raw = pthread_getspecific(key) {
            return Unmanaged<AnyObject>.fromOpaque(raw).takeUnretainedValue() as! T
        }
        let v = make()
        pthread_setspecific(key, Unmanaged<AnyObject>.passRetained(v as AnyObject).toOpaque())
        return v
    }

    /// This thread's value if it was created.
    public var existing: T? {
        guard let raw = pthread_getspecific(key) else { return nil }
        return (Unmanaged<AnyObject>.fromOpaque(raw).takeUnretainedValue() as! T)
    }
}
