import MoonbaseCore

/// The connection inside `PGPool.transaction`: a `BEGIN ISOLATION LEVEL …` transaction, or a
/// `SAVEPOINT` when the transaction is nested in another one on the same thread.
///
/// Thread-confined: valid only inside the `transaction` body that received it, on that thread.
/// Higher layers keep per-transaction state in `userInfo` (restored when a nested part rolls
/// back) and register `onCommit` work, which runs once the outermost transaction has committed,
/// after its connection went back to the pool: work that writes opens a transaction of its own.
/// A run that is retried after a serialization failure starts with fresh `userInfo` and hooks.
public final class PGTransaction {
    /// The transaction's connection.
    public let connection: PGConnection
    /// The pool this transaction belongs to.
    public let pool: PGPool
    /// Per-transaction state of higher layers (value-typed entries snapshot cleanly).
    public var userInfo: [String: Any] = [:]
    private var commitHooks: [() -> Void] = []
    private var savepointDepth = 0

    init(connection: PGConnection, pool: PGPool) {
        self.connection = connection
        self.pool = pool
    }

    /// Runs `action` after the outermost transaction commits (dropped on rollback).
    public func onCommit(_ action: @escaping () -> Void) { commitHooks.append(action) }

    /// Nesting depth: 0 in the outermost body.
    public var depth: Int { savepointDepth }

    func runCommitHooks() {
        let hooks = commitHooks
        commitHooks = []
        for h in hooks { h() }
    }

    /// A nested transaction: a savepoint that a failing `body` rolls back (only its own changes,
    /// `userInfo` edits and commit hooks) before the error propagates to the caller, who may
    /// catch it and carry on, or let it roll back everything.
    func nested<T>(_ body: (PGTransaction) throws(ParseError) -> T) throws(ParseError) -> T {
        savepointDepth += 1
        let name = "mb_sp\(savepointDepth)"
        defer { savepointDepth -= 1 }
        try connection.execute("SAVEPOINT \(name)")
        let savedInfo = userInfo
        let savedHooks = commitHooks.count
        do {
            let result = try body(self)
            try connection.execute("RELEASE SAVEPOINT \(name)")
            return result
        } catch {
            // A lost connection makes these fail too; the outer transaction reports it.
            _ = try? connection.execute("ROLLBACK TO SAVEPOINT \(name)")
            _ = try? connection.execute("RELEASE SAVEPOINT \(name)")
            userInfo = savedInfo
            commitHooks.removeSubrange(savedHooks...)
            throw error
        }
    }
}
