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
/// Thread-safety: `Sendable`; `update` bodies run under the lock and must not read `current`.
public final class ThreadSnapshot<T: Sendable>: Sendable {
    private let locked: Mutex<T>
    private let generation = Atomic<UInt64>(1)
    /// Tells this snapshot's copies from another's in a thread's list (ids are never reused).
    private let id = snapshotIds.add(1, ordering: .relaxed).newValue

    public init(_ initial: T) { locked = Mutex(initial) }

    final class Box { let value: T; init(_ v: T) { value = v } }

    /// The current value.
    public var current: T {
        let copies = threadCopies.value
        let g = generation.load(ordering: .acquiring)
        let i = copies.slot(id)
        if copies.generations[i] == g { return unsafeDowncast(copies.boxes[i]!, to: Box.self).value }
        let (v, now) = locked.withLock { v in (v, generation.load(ordering: .relaxed)) }
        copies.generations[i] = now
        copies.boxes[i] = Box(v)
        return v
    }

    /// Changes the value under the lock; every thread sees the change from its next read on.
    public func update(_ body: (inout T) -> Void) {
        locked.withLock { v in
            body(&v)
            generation.add(1, ordering: .releasing)
        }
    }
}

private let snapshotIds = Atomic<UInt64>(0)
private let threadCopies = ThreadLocal { ThreadSnapshotCopies() }

/// One thread's copies: a few snapshots exist in a process (one of each kind per server), so a
/// short list scanned by id; the oldest slot is reused when it is full.
private final class ThreadSnapshotCopies {
    static let capacity = 16
    var ids = [UInt64](repeating: 0, count: capacity)
    var generations = [UInt64](repeating: 0, count: capacity)
    var boxes = [AnyObject?](repeating: nil, count: capacity)
    var next = 0

    /// The slot of snapshot `id` (a fresh one, generation 0 = stale, when it has none).
    func slot(_ id: UInt64) -> Int {
        for i in 0..<Self.capacity where ids[i] == id { return i }
        let i = next
        next = (next + 1) % Self.capacity
        ids[i] = id
        generations[i] = 0
        boxes[i] = nil
        return i
    }
}
