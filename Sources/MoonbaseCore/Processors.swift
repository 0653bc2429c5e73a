#if canImport(Glibc)
import Glibc
#endif

/// The machine's processors, for thread-count defaults (one place, one fallback).
public enum Processors {
    /// Online CPUs; 1 if the system cannot tell (a single thread is always a safe default).
    public static var online: Int {
        let n = sysconf(Int32(_SC_NPROCESSORS_ONLN))
        return n > 0 ? n : 1
    }
}
