import MoonbaseCore
import Synchronization

/// A small per-thread number used to pick a lock stripe, handed out round-robin on a thread's
/// first use, so the first `stripeCount` threads (the HTTP pool and workers) get distinct stripes.
final class ThreadSlot {
    let index: Int
    init(index: Int) { self.index = index }
}

/// Next slot number to hand out.
private let nextThreadSlot = Atomic<Int>(0)

/// This thread's slot (created on first use).
let threadSlot = ThreadLocal<ThreadSlot> {
    ThreadSlot(index: nextThreadSlot.wrappingAdd(1, ordering: .relaxed).oldValue)
}

/// Rounds `n` up to a power of two in 1...1024, so a stripe is picked with a mask.
func stripeCount(_ n: Int) -> Int {
    var c = 1
    while c < min(max(n, 1), 1024) { c <<= 1 }
    return c
}

/// One lock stripe: a `Mutex` padded to its own cache lines, so two threads updating
/// neighbouring stripes do not bounce one line between cores.
///
/// Concurrency: `Sendable` through `Mutex`; the padding is immutable.
final class Stripe<Value: Sendable>: Sendable {
    private let padBefore: (Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64) = (0, 0, 0, 0, 0, 0, 0, 0)
    let state: Mutex<Value>
    private let padAfter: (Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64) = (0, 0, 0, 0, 0, 0, 0, 0)

    init(_ value: sending Value) { state = Mutex(value) }
}
