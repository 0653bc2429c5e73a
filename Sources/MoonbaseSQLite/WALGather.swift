import CSQLiteWAL

/// Every connection opens its file through the `moonbase` VFS (`Sources/CSQLiteWAL`): SQLite's
/// default VFS, except that a transaction's WAL frames reach the file in one write at commit
/// instead of two system calls per frame, and that a writer's sub-journals (the page copies
/// that let a savepoint or a statement roll back alone) are kept in one reusable buffer.
/// Readers and durability see no difference; the C file says why that holds. Falls back to the
/// default VFS if it cannot be registered.
public enum WALGather {
    /// The VFS name for `sqlite3_open_v2` (registered on first use), or nil for the default.
    static var vfsName: UnsafePointer<CChar>? { mb_walbuf_name() }

    public struct Stats: Sendable, Equatable {
        /// WAL frames written through the buffer.
        public var frames: UInt64
        /// Writes of the buffer to the file.
        public var writes: UInt64
        /// WAL writes that were not frames in sequence (the WAL header, a frame rewritten in place).
        public var passed: UInt64
        /// Sub-journals (savepoints' and statements' page copies) served from memory, and the
        /// bytes written to them: process-wide only (0 in a file's own counters).
        public var subjournals: UInt64 = 0
        public var subjournalBytes: UInt64 = 0
    }

    /// Counters since the process started, all connections together.
    public static var stats: Stats {
        Stats(mb_walbuf_get_stats())
    }
}

extension WALGather.Stats {
    init(_ s: mb_walbuf_stats) {
        self.init(frames: s.frames, writes: s.flushes, passed: s.passed, subjournals: s.subjournals,
                  subjournalBytes: s.subjournal_bytes)
    }
}

extension Connection {
    /// The counters of this connection's WAL file, or nil when it does not go through the
    /// gathering VFS (or has no WAL open yet).
    public var walGatherStats: WALGather.Stats? {
        var s = mb_walbuf_stats()
        return mb_walbuf_file_stats(handle, &s) == 1 ? WALGather.Stats(s) : nil
    }
}
