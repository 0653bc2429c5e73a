import MoonbaseCore
import MoonbaseJSON
import Synchronization

/// A session as `AuthService.resolveSession` finds it: who the token belongs to, the user object
/// as that user sees it (email included, password hash never), and the session row.
public struct ResolvedSession: Sendable, Equatable {
    /// The user's objectId (the caller's `Identity.user`).
    public var userId: String
    /// The `_User` object as the user themself sees it.
    public var user: JSONObject
    /// The `_Session` objectId (for `updateUser(currentSessionId:)`, `revokeSessions(except:)`).
    public var sessionId: String
    /// When the token stops working, ms since the epoch.
    public var expiresAt: Int64

    public init(userId: String, user: JSONObject, sessionId: String, expiresAt: Int64) {
        self.userId = userId
        self.user = user
        self.sessionId = sessionId
        self.expiresAt = expiresAt
    }
}

/// In-memory cache of resolved sessions, keyed by token hash, validated by an epoch.
///
/// Correctness rests on the epoch, not on callers remembering to invalidate: the store bumps the
/// auth epoch (`AccountStore.authEpoch`) in the same transaction as any update or delete of a
/// `_User` or `_Session` row, whoever makes it (this module, the REST object service, Lua
/// `db.*`, a master-key delete). A lookup first reads the committed epoch (one indexed row);
/// when it differs from the cache's, the cache is emptied. Entries are
/// stored with the epoch read *before* the rows were fetched, so a change committed in between
/// bumps the epoch past them and they are never served. Inserts do not bump it: a new session or
/// user cannot make a cached entry wrong. Expired entries are never served.
///
/// Thread-safety: `Sendable`; one `Mutex` around the table.
final class SessionCache: Sendable {
    private struct State {
        var epoch: Int64 = -1
        var entries: [String: ResolvedSession] = [:]
    }

    private let state = Mutex(State())
    let capacity: Int

    init(capacity: Int) { self.capacity = max(capacity, 1) }

    /// The cached session for `tokenHash` if it was cached at `epoch` and is not expired at `now`.
    func lookup(_ tokenHash: String, epoch: Int64, now: Int64) -> ResolvedSession? {
        state.withLock { s in
            if s.epoch != epoch {
                if epoch > s.epoch {
                    s.entries.removeAll(keepingCapacity: true)
                    s.epoch = epoch
                }
                return nil
            }
            guard let e = s.entries[tokenHash], e.expiresAt > now else { return nil }
            return e
        }
    }

    /// Caches `session`, read after observing `epoch` (dropped when the cache has moved on).
    func store(_ tokenHash: String, _ session: ResolvedSession, epoch: Int64) {
        state.withLock { s in
            if epoch > s.epoch {
                s.entries.removeAll(keepingCapacity: true)
                s.epoch = epoch
            }
            guard epoch == s.epoch else { return }
            if s.entries.count >= capacity { s.entries.removeAll(keepingCapacity: true) }
            s.entries[tokenHash] = session
        }
    }

    /// Drops one entry (logout), ahead of the epoch doing it.
    func remove(_ tokenHash: String) {
        _ = state.withLock { $0.entries.removeValue(forKey: tokenHash) }
    }

    /// Drops everything.
    func removeAll() {
        state.withLock { $0.entries.removeAll() }
    }

    var count: Int { state.withLock { $0.entries.count } }
}
