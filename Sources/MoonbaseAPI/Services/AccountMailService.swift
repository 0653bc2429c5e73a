import MoonbaseCore
import MoonbaseCrypto
import MoonbaseJSON
import MoonbaseStore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Password reset and email verification: single-use tokens (stored as SHA-256 hashes, never
/// in clear), their expiry, throttling, and a background thread that looks the address up and
/// runs the mail hook after the request was answered — so a known and an unknown address get
/// the same answer in the same time.
///
/// Thread-safety: tokens live in the store (`MailTokenStore`); throttle counters and the work
/// queue behind mutexes.
public final class AccountMailService: Sendable {
    public enum Kind: String, Sendable {
        case passwordReset
        case verifyEmail

        /// How long a link works: 1 hour for a reset, 24 hours for a verification.
        var lifetimeMillis: Int64 { self == .passwordReset ? 3_600_000 : 86_400_000 }
        /// The host page of the link.
        var page: String { self == .passwordReset ? "request_password_reset" : "verify_email" }
    }

    /// Requests allowed per address and per IP within `throttleWindowMillis`.
    public static let perAddressLimit = 5
    public static let perIPLimit = 20
    public static let throttleWindowMillis: Int64 = 3_600_000

    let store: any MailTokenStore
    let clock: any HostClock
    let throttle = Mutex<[String: (start: Int64, count: Int)]>([:])
    let queue = Mutex<[@Sendable () -> Void]>([])
    let wake = Semaphore()
    let started = Atomic<Bool>(false)

    public init(store: any MailTokenStore, clock: any HostClock) {
        self.store = store
        self.clock = clock
    }

    // MARK: throttling

    /// Counts one request for the address and the IP; 155 when either is over its limit.
    /// Unknown addresses count like known ones, so the answer reveals nothing.
    func admit(email: String, ip: String) throws(ParseError) {
        let now = clock.nowMillis()
        let window = Self.throttleWindowMillis
        let refused = throttle.withLock { t -> Bool in
            if t.count > 50_000 { t = t.filter { now - $0.value.start < window } }
            func over(_ key: String, _ limit: Int) -> Bool {
                var e = t[key] ?? (now, 0)
                if now - e.start >= window { e = (now, 0) }
                e.count += 1
                t[key] = e
                return e.count > limit
            }
            let a = over("e:" + email.lowercased(), Self.perAddressLimit)
            let b = over("i:" + ip, Self.perIPLimit)
            return a || b
        }
        if refused { throw ParseError(.requestLimitExceeded, "Too many requests for this address; try again later.") }
    }

    // MARK: tokens

    /// A new token for the user (older ones of the same kind stop working); its clear text.
    func issue(_ kind: Kind, userId: String, email: String) throws(ParseError) -> String {
        let token = Random.hex(32)
        let now = clock.nowMillis()
        try store.saveMailToken(hash: TokenHash.sha256Hex(token), userId: userId, kind: kind.rawValue, email: email,
                                expiresAt: now + kind.lifetimeMillis, now: now)
        return token
    }

    /// Uses a token up: the user id and the address the link was sent to, or nil when the token
    /// is unknown, of another kind, used or expired.
    func consume(_ kind: Kind, token: String) throws(ParseError) -> (userId: String, email: String)? {
        guard token.utf8.count == 64 else { return nil }
        guard let found = try store.takeMailToken(hash: TokenHash.sha256Hex(token), kind: kind.rawValue),
              found.expiresAt > clock.nowMillis() else { return nil }
        return (found.userId, found.email)
    }

    /// Whether a token would be accepted now (the GET of a page shows the form only then; it
    /// does not use the token up).
    func isValid(_ kind: Kind, token: String) -> Bool {
        guard token.utf8.count == 64,
              let e = try? store.mailTokenExpiry(hash: TokenHash.sha256Hex(token), kind: kind.rawValue) else { return false }
        return e > clock.nowMillis()
    }

    // MARK: background work

    /// Mails waiting at most; beyond, new ones are dropped (and logged) rather than letting a
    /// flood of requests grow memory without bound.
    public static let maxQueued = 10_000

    /// Runs `work` on the mail thread, after the current request has been answered. Mails are
    /// sent one at a time, in order.
    func enqueue(_ work: @escaping @Sendable () -> Void) {
        if !started.exchange(true, ordering: .acquiringAndReleasing) { startThread() }
        let queued = queue.withLock { q -> Bool in
            guard q.count < Self.maxQueued else { return false }
            q.append(work)
            return true
        }
        if queued { wake.signal() } else { Log.warn("mail queue full: a password reset or verification mail was dropped") }
    }

    func startThread() {
        let box = Unmanaged.passRetained(self).toOpaque()
        var tid = pthread_t()
        pthread_create(&tid, nil, { arg in
            let s = Unmanaged<AccountMailService>.fromOpaque(arg!).takeRetainedValue()
            s.loop()
        }, box)
        pthread_detach(tid)
    }

    func loop() -> Never {
        while true {
            wake.wait()
            while let work = queue.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { work() }
        }
    }
}

/// A counting semaphore over a pthread mutex and condition variable.
final class Semaphore: @unchecked Sendable {
    // @unchecked: the pthread objects are heap-allocated once and are themselves the locks.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var count = 0

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(cond, nil)
    }

    func signal() {
        pthread_mutex_lock(mutex)
        count += 1
        pthread_cond_signal(cond)
        pthread_mutex_unlock(mutex)
    }

    func wait() {
        pthread_mutex_lock(mutex)
        while count == 0 { pthread_cond_wait(cond, mutex) }
        count -= 1
        pthread_mutex_unlock(mutex)
    }
}
