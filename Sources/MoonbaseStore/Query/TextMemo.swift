import Synchronization

/// SQL texts kept once built, shared by every thread: texts that depend only on names and
/// shapes (a class, a field, a filter's form; never a value, which is a bind) cost string
/// interpolation on every query or write if built each time: 4,500 instructions of a create,
/// 20,000 of a map query, 42,000 of a W5 query. Keys come from code and schemas, so a memo holds
/// a handful; it is emptied when full rather than tracking use.
final class TextMemo<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private let values = Mutex<[Key: Value]>([:])
    let capacity: Int

    init(capacity: Int = 1024) { self.capacity = capacity }

    /// The value kept for `key`, built by `build` the first time.
    func value(_ key: Key, build: () -> Value) -> Value {
        if let v = values.withLock({ $0[key] }) { return v }
        let v = build()
        values.withLock { m in
            if m.count >= capacity { m.removeAll(keepingCapacity: true) }
            m[key] = v
        }
        return v
    }
}
