import MoonbaseAPI
import MoonbaseCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Polls folders every 250 ms (names, sizes and mtimes in ns) and calls `onChange` with the
/// folders that changed. Polling instead of inotify: four `stat`s a second per file is
/// nothing, works on every file system (bind mounts, editors that replace files), and keeps
/// the reload path in one place; the 1 s reload budget is met with margin.
public final class FolderWatcher: Sendable {
    let folders: [String]
    let onChange: @Sendable ([String]) -> Void
    let stopped = Atomic<Bool>(false)
    let intervalMs: Int
    let baseline = Mutex<[[String]]>([])

    public init(folders: [String], intervalMs: Int = 250, onChange: @escaping @Sendable ([String]) -> Void) {
        self.folders = folders
        self.onChange = onChange
        self.intervalMs = intervalMs
    }

    /// Names, sizes and mtimes, folders included to 4 levels (the modules under `functions/lib/`).
    static func fingerprint(_ dir: String, depth: Int = 0) -> [String] {
        FileSystem.list(dir).flatMap { name -> [String] in
            var st = stat()
            let path = dir + "/" + name
            guard stat(path, &st) == 0 else { return [name] }
            let me = "\(name):\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
            if (st.st_mode & S_IFMT) == S_IFDIR && depth < 4 {
                return [me] + fingerprint(path, depth: depth + 1).map { name + "/" + $0 }
            }
            return [me]
        }
    }

    /// Starts watching: a change made after `start` returns is seen (the baseline is taken
    /// here, not later on the thread).
    public func start() {
        baseline.withLock { $0 = folders.map { FolderWatcher.fingerprint($0) } }
        let box = Unmanaged.passRetained(self).toOpaque()
        var tid = pthread_t()
        pthread_create(&tid, nil, { arg in
            let w = Unmanaged<FolderWatcher>.fromOpaque(arg!).takeRetainedValue()
            w.loop()
            return nil
        }, box)
        pthread_detach(tid)
    }

    public func stop() { stopped.store(true, ordering: .relaxed) }

    func loop() {
        var last = baseline.withLock { $0 }
        while !stopped.load(ordering: .relaxed) {
            usleep(useconds_t(intervalMs * 1000))
            let now = folders.map { FolderWatcher.fingerprint($0) }
            let changed = folders.indices.filter { now[$0] != last[$0] }.map { folders[$0] }
            last = now
            if !changed.isEmpty { onChange(changed) }
        }
    }
}
