#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// A value that every request reads and that rarely changes (class schemas, the trigger runner,
/// the current Cloud Code generation), read without a lock shared between threads.
///
/// Why: under ten Lua reads per request on two cores, workers and I/O threads spent about a fifth
/// of the server's CPU spinning in the one `Mutex` of the class schemas. Here each thread keeps
/// its own copy of the value (for copy-on-write values, a reference to the same storage) with the
/// generation it was taken at; every `update` bumps the generation under the lock, so a thread
/// whose copy is of the current generation holds exactly what the lock would have shown it, and
/// any other thread takes the lock once to refresh its copy.
///
/// Thread-safety: `Sendable`; `update` bodies run under the lock and must not read the snapshot.
public final class ThreadSnapshot<T: Sendable>: Sendable {
    @usableFromInline let locked: Mutex<T>
    @usableFromInline let generation = Atomic<UInt64>(1)
    /// Tells this snapshot's copies from another's in a thread's list (ids are never reused).
    @usableFromInline let id = snapshotIds.add(1, ordering: .relaxed).newValue

    public init(_ initial: T) { locked = Mutex(initial) }

    @usableFromInline final class Box {
        @usableFromInline let value: T
        @usableFromInline init(_ v: T) { value = v }
    }

    /// The current value.
    @inlinable public var current: T { read { $0 } }

    /// `body` of the current value, without copying it out (a field of a large value).
    // Inlinable: callers in other modules get it specialized for their type (unspecialized, its
    // generic metadata lookups cost more than the lock it replaces).
    @inlinable public func read<R>(_ body: (T) -> R) -> R {
        let e = ThreadSnapshotCopies.current.entry(id)
        let g = generation.load(ordering: .acquiring)
        if e.pointee.generation != g {
            let (v, now) = locked.withLock { v in (v, generation.load(ordering: .relaxed)) }
            e.pointee.box?.release()
            e.pointee.box = Unmanaged.passRetained(Box(v) as AnyObject)
            e.pointee.generation = now
        }
        // A strong reference for the length of `body` (which may read other snapshots and so
        // replace this entry); the box is this thread's own, its count touched by no other.
        let box = unsafeDowncast(e.pointee.box.unsafelyUnwrapped.takeUnretainedValue(), to: Box.self)
        return body(box.value)
    }

    /// Changes the value under the lock; every thread sees the change from its next read on.
    @inlinable public func update(_ body: (inout T) -> Void) {
        locked.withLock { v in
            body(&v)
            generation.add(1, ordering: .releasing)
        }
    }
}

let snapshotIds = Atomic<UInt64>(0)

/// One thread's copies: a few snapshots exist in a process (one of each kind per server), so a
/// short list scanned by id; the oldest slot is reused when it is full.
@usableFromInline final class ThreadSnapshotCopies {
    @usableFromInline struct Entry {
        @usableFromInline var id: UInt64 = 0
        @usableFromInline var generation: UInt64 = 0   // 0: none (generations start at 1)
        @usableFromInline var box: Unmanaged<AnyObject>?
        init(id: UInt64 = 0) { self.id = id }
    }
    static let capacity = 16
    let entries = UnsafeMutablePointer<Entry>.allocate(capacity: capacity)
    var next = 0

    init() { entries.initialize(repeating: Entry(), count: Self.capacity) }

    deinit {
        for i in 0..<Self.capacity { entries[i].box?.release() }
        entries.deinitialize(count: Self.capacity)
        entries.deallocate()
    }

    /// The entry of snapshot `id` (a fresh one, of generation 0, when it has none).
    @usableFromInline func entry(_ id: UInt64) -> UnsafeMutablePointer<Entry> {
        for i in 0..<Self.capacity where entries[i].id == id { return entries + i }
        let e = entries + next
        next = (next + 1) % Self.capacity
        e.pointee.box?.release()
        e.pointee = Entry(id: id)
        return e
    }

    private static let key: pthread_key_t = {
        var k = pthread_key_t()
        // Released when the thread exits.
        pthread_key_create(&k) { raw in
            if let raw { Unmanaged<ThreadSnapshotCopies>.fromOpaque(raw).release() }
        }
        return k
    }()

    /// This thread's copies.
    @usableFromInline static var current: ThreadSnapshotCopies {
        if let raw = pthread_getspecific(key) { return Unmanaged<ThreadSnapshotCopies>.fromOpaque(raw).takeUnretainedValue() }
        let c = ThreadSnapshotCopies()
        pthread_setspecific(key, Unmanaged.passRetained(c).toOpaque())
        return c
    }
}
