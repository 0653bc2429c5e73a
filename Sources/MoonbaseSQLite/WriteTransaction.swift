import MoonbaseCore

/// The writer connection inside `Database.write`: a `BEGIN IMMEDIATE` transaction, or a
/// `SAVEPOINT` when the write is nested in another one on the same thread.
///
/// Thread-confined: valid only inside the `write` body that received it, on that thread. Higher
/// layers extend it (MoonbaseStore's `insert`/`update`/`delete`) and keep per-transaction state
/// in `userInfo`, which is restored when a nested part rolls back, and register `onCommit`
/// actions (e.g. publishing a schema change to a shared cache) that run only once the outermost
/// transaction has committed, before the writer lock is released.
public final class WriteTransaction {
    /// The writer connection.
    public let connection: Connection
    /// The database this transaction writes to.
    public let database: Database
    /// Per-transaction state of higher layers (value-typed entries snapshot cleanly).
    public var userInfo: [String: Any] = [:]
    private var commitHooks: [() -> Void] = []
    private var savepointDepth = 0

    init(connection: Connection, database: Database) {
        self.connection = connection
        self.database = database
    }

    /// Runs `action` after the outermost transaction commits (dropped on rollback).
    public func onCommit(_ action: @escaping () -> Void) { commitHooks.append(action) }

    /// Nesting depth: 0 in the outermost body.
    public var depth: Int { savepointDepth }

    func runCommitHooks() {
        // A hook may write (an after-trigger's own db.* writes), and those writes register hooks
        // of their own on this transaction: run them too, in order, until none is left.
        while !commitHooks.isEmpty {
            let hooks = commitHooks
            commitHooks = []
            for h in hooks { h() }
        }
    }

    /// The statements of the savepoint at `depth` (`mb_sp<depth>`), written once for the depths
    /// writes reach (a grouped create nests two deep): built per savepoint, their texts were
    /// ~2,000 instructions of every create.
    static let savepoints: [(open: String, release: String, rollback: String)] = (0...8).map(savepointTexts)

    static func savepointTexts(_ depth: Int) -> (open: String, release: String, rollback: String) {
        ("SAVEPOINT mb_sp\(depth)", "RELEASE mb_sp\(depth)", "ROLLBACK TO mb_sp\(depth)")
    }

    static func savepointSQL(_ depth: Int) -> (open: String, release: String, rollback: String) {
        depth < savepoints.count ? savepoints[depth] : savepointTexts(depth)
    }

    /// A nested write: a savepoint that a failing `body` rolls back (only its own changes, its
    /// `userInfo` edits and commit hooks) before the error propagates to the caller, who may
    /// catch it and carry on, or let it roll back everything.
    public func nested<T>(_ body: (WriteTransaction) throws(ParseError) -> T) throws(ParseError) -> T {
        savepointDepth += 1
        defer { savepointDepth -= 1 }
        let sql = Self.savepointSQL(savepointDepth)
        try connection.run(sql.open)
        let savedInfo = userInfo
        let savedHooks = commitHooks.count
        do {
            let result = try body(self)
            try connection.run(sql.release)
            return result
        } catch {
            // If SQLite already rolled the whole transaction back (e.g. disk full) these fail
            // and the outer COMMIT will report it; the original error is what matters here.
            _ = try? connection.run(sql.rollback)
            _ = try? connection.run(sql.release)
            userInfo = savedInfo
            commitHooks.removeSubrange(savedHooks...)
            throw error
        }
    }
}
