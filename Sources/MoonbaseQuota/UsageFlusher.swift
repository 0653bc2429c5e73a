import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Writes the quota's in-memory usage through a `UsageSink` every `interval` and at shutdown: the
/// long-lived service that keeps writes off the request path.
///
/// Runs on its own pthread (not a Swift concurrency thread: the request path is plain threads and
/// this must not depend on a cooperative pool being free). Each flush is one `sink.write` call,
/// which the sink runs as one transaction; an empty flush does not call the sink. A failed write
/// is logged and its batch requeued, so it is retried with the next flush. Flushes never overlap
/// (`flushNow` from another thread waits for a running one), so window counts are written in order.
///
/// A crash loses at most one interval (default 1 s) of accounting; `shutdown()` flushes the rest.
///
/// Concurrency: `@unchecked Sendable` because of the pthread mutex/condition pair, which are
/// designed to be shared between threads and are only touched through their own APIs (and
/// destroyed in `deinit`, when no thread can hold a reference); all other state is in `Mutex`/`Atomic`.
public final class UsageFlusher: @unchecked Sendable {
    private let quota: Quota
    private let sink: any UsageSink
    private let intervalMillis: Int
    private let flushLock = Mutex<Void>(())
    private let stopping = Atomic<Bool>(false)
    private let started = Atomic<Bool>(false)
    private let flushes = Atomic<Int>(0)
    private let failures = Atomic<Int>(0)
    private let thread = Mutex<pthread_t?>(nil)
    /// Heap-allocated so their addresses are stable (a pthread object must not move).
    private let wakeMutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let wakeCond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    /// - Parameter intervalMillis: time between flushes; defaults to the quota's config (1 s).
    public init(quota: Quota, sink: any UsageSink, intervalMillis: Int? = nil) {
        self.quota = quota
        self.sink = sink
        self.intervalMillis = max(1, intervalMillis ?? quota.config.flushIntervalMillis)
        wakeMutex.initialize(to: pthread_mutex_t())
        wakeCond.initialize(to: pthread_cond_t())
        pthread_mutex_init(wakeMutex, nil)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(wakeCond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(wakeCond)
        pthread_mutex_destroy(wakeMutex)
        wakeCond.deallocate()
        wakeMutex.deallocate()
    }

    /// Flushes that wrote something, and writes that failed (for `/metrics` and tests).
    public var flushCount: Int { flushes.load(ordering: .relaxed) }
    public var failureCount: Int { failures.load(ordering: .relaxed) }

    /// Starts the background thread (once; later calls do nothing).
    public func start() {
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let box = Unmanaged.passRetained(self).toOpaque()
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, { arg in
            let flusher = Unmanaged<UsageFlusher>.fromOpaque(arg!).takeRetainedValue()
            flusher.loop()
            return nil
        }, box)
        if rc != 0 {
            Unmanaged<UsageFlusher>.fromOpaque(box).release()
            started.store(false, ordering: .relaxed)
            Log.error("usage flusher: pthread_create failed (\(rc)); usage will be flushed only at shutdown")
            return
        }
        thread.withLock { $0 = tid }
    }

    /// Writes everything pending now. Returns the number of rows and windows written.
    /// - Throws: the sink's error; the batch is then back in memory for the next flush.
    @discardableResult
    public func flushNow() throws -> Int {
        try flushLock.withLock { _ in
            let now = quota.clock.nowMillis()
            let batch = quota.drainBatch(now: now)
            // While a limit applies, a flush also reads what the other hosts flushed (even with
            // nothing of its own to write: an idle host must still learn the cluster's totals).
            let limited = quota.config.monthlyRequests > 0 || !quota.windowKeys(now: now).isEmpty
            guard !batch.isEmpty || limited else { return 0 }
            do {
                if limited {
                    if let shared = try sink.writeReadingShared(batch, monthStart: UTCCalendar.monthStart(now),
                                                                 monthEnd: UTCCalendar.nextMonthStart(now),
                                                                 minute: UTCCalendar.minuteStart(now)) {
                        quota.absorbShared(shared, batch: batch, now: now)
                    }
                } else {
                    try sink.write(batch)
                }
            } catch {
                quota.requeue(batch)
                failures.add(1, ordering: .relaxed)
                throw error
            }
            if batch.isEmpty { return 0 }
            flushes.add(1, ordering: .relaxed)
            return batch.rows.count + batch.windows.count
        }
    }

    /// Stops the thread and writes what is left (shutdown flushes accounting).
    /// Safe to call more than once and without `start()`.
    public func shutdown() {
        stopping.store(true, ordering: .releasing)
        pthread_mutex_lock(wakeMutex)
        pthread_cond_signal(wakeCond)
        pthread_mutex_unlock(wakeMutex)
        if let tid = thread.withLock({ t -> pthread_t? in defer { t = nil }; return t }) {
            pthread_join(tid, nil)
        }
        do { try flushNow() } catch { Log.error("usage flush at shutdown failed: \(error)") }
    }

    private func loop() {
        while !stopping.load(ordering: .acquiring) {
            waitInterval()
            if stopping.load(ordering: .acquiring) { break }
            do { try flushNow() } catch { Log.error("usage flush failed (kept for the next one): \(error)") }
        }
    }

    /// Sleeps one interval on the condition, returning early when `shutdown` signals.
    private func waitInterval() {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let ns = Int(ts.tv_nsec) + (intervalMillis % 1000) * 1_000_000
        ts.tv_sec += intervalMillis / 1000 + ns / 1_000_000_000
        ts.tv_nsec = ns % 1_000_000_000
        pthread_mutex_lock(wakeMutex)
        if !stopping.load(ordering: .acquiring) { _ = pthread_cond_timedwait(wakeCond, wakeMutex, &ts) }
        pthread_mutex_unlock(wakeMutex)
    }
}
