/* WAL frame gathering (and, further down, sub-journals in memory): a VFS shim over SQLite's
 * default VFS.
 *
 * Why: SQLite writes each WAL frame with two pwrite calls (its 24-byte header, then the page), so
 * a commit of 100 pages is 200 system calls, each taking the file's locks and touching one or two
 * page-cache pages (the frames are 4,120 bytes, not page aligned). Measured on this project's
 * machine kind: 2.2 µs of CPU per frame written that way, 0.6 µs when 64 frames go in one write.
 * A create dirties about six pages, and the writer is the one thread every write waits for.
 * SQLite has no option for this (3.40); a VFS shim is its documented extension point.
 *
 * What: a WAL file opened through this VFS keeps the frames of a transaction in a buffer while
 * they arrive in sequence (header at the offset where the buffer ends, then its page) and writes
 * the buffer with one call when the commit frame's page arrives (its header's "database size"
 * field is non-zero, which SQLite sets only on a transaction's last frame), when the buffer is
 * full, and before anything else touches the file (a read, a write elsewhere, sync, truncate,
 * size, close, a file-control). Other files, and every other write, go straight through.
 *
 * Why it is safe: readers find frames through the WAL index, and SQLite publishes a commit there
 * only after its frame writes returned, by which time the buffer is in the file (the kernel's page
 * cache, as before: synchronous=NORMAL does not sync at commit, so kill -9 loses nothing more than
 * it did). Frames of a transaction not yet committed are invisible to other connections; the
 * writer's own reads of them flush first. A transaction rolled back after spilling frames leaves
 * its frames to be written before the next write, where SQLite would have written them anyway.
 * A connection is used by one thread at a time, so the buffer needs no lock.
 */
#include "mb_walbuf.h"
#include <sqlite3.h>
#include <stdatomic.h>
#include <string.h>
#include <pthread.h>
#include <stdlib.h>

#define WAL_HEADER 32          /* the WAL file header; frames start after it */
#define FRAME_HEADER 24
#define BUFFER_BYTES (512 * 1024)
#define WRITE_PIECE (124 * 1024)

typedef struct wb_file {
    sqlite3_file base;          /* pMethods: &wb_io for a WAL file */
    sqlite3_file *real;         /* the default VFS's file, in the memory just after this struct */
    unsigned char *buf;         /* allocated at the first frame, freed at close */
    size_t n;                   /* bytes pending */
    sqlite3_int64 start;        /* file offset of buf[0] */
    int expect_page;            /* the last write was a frame header: its page comes next */
    int commit;                 /* ... and that header is a commit frame's */
    mb_walbuf_stats stats;      /* this file's own counters (mb_walbuf_file_stats) */
} wb_file;

static sqlite3_vfs *wb_base;
static sqlite3_vfs wb_vfs;
static sqlite3_io_methods wb_io;
static _Atomic uint64_t st_frames, st_flushes, st_passed;

static int wb_flush(wb_file *f) {
    f->expect_page = 0;
    f->commit = 0;
    if (f->n == 0) return SQLITE_OK;
    size_t n = f->n;
    f->n = 0;
    /* The default VFS's xWrite loops over short writes and reports SQLITE_FULL / IOERR_WRITE,
     * but takes at most 128 KiB - 1 bytes a call (unix's seekAndWriteFd masks the length with
     * 0x1ffff): write in pieces below that. */
    for (size_t done = 0; done < n;) {
        size_t piece = n - done < WRITE_PIECE ? n - done : WRITE_PIECE;
        atomic_fetch_add_explicit(&st_flushes, 1, memory_order_relaxed);
        f->stats.flushes++;
        int rc = f->real->pMethods->xWrite(f->real, f->buf + done, (int)piece, f->start + (sqlite3_int64)done);
        if (rc != SQLITE_OK) return rc;
        done += piece;
    }
    return SQLITE_OK;
}

static int wb_write(sqlite3_file *pf, const void *p, int amt, sqlite3_int64 off) {
    wb_file *f = (wb_file *)pf;
    int in_sequence = off >= WAL_HEADER && (f->n == 0 || off == f->start + (sqlite3_int64)f->n);
    if (in_sequence && !f->expect_page && amt == FRAME_HEADER) {
        if (f->n + FRAME_HEADER + 65536 > BUFFER_BYTES) {          /* room for the page to come */
            int rc = wb_flush(f);
            if (rc != SQLITE_OK) return rc;
        }
        if (!f->buf) {
            f->buf = sqlite3_malloc(BUFFER_BYTES);
            if (!f->buf) goto pass;
        }
        if (f->n == 0) f->start = off;
        memcpy(f->buf + f->n, p, FRAME_HEADER);
        f->n += FRAME_HEADER;
        const unsigned char *h = p;
        f->commit = (h[4] | h[5] | h[6] | h[7]) != 0;   /* database size after commit, big-endian */
        f->expect_page = 1;
        return SQLITE_OK;
    }
    if (in_sequence && f->expect_page && amt > 0 && (size_t)amt <= 65536 && f->n > 0) {
        memcpy(f->buf + f->n, p, (size_t)amt);
        f->n += (size_t)amt;
        f->expect_page = 0;
        atomic_fetch_add_explicit(&st_frames, 1, memory_order_relaxed);
        f->stats.frames++;
        return f->commit ? wb_flush(f) : SQLITE_OK;
    }
pass:;
    int rc = wb_flush(f);
    if (rc != SQLITE_OK) return rc;
    atomic_fetch_add_explicit(&st_passed, 1, memory_order_relaxed);
    f->stats.passed++;
    return f->real->pMethods->xWrite(f->real, p, amt, off);
}

static int wb_close(sqlite3_file *pf) {
    wb_file *f = (wb_file *)pf;
    int rc = wb_flush(f);
    sqlite3_free(f->buf);
    f->buf = NULL;
    int rc2 = f->real->pMethods ? f->real->pMethods->xClose(f->real) : SQLITE_OK;
    return rc != SQLITE_OK ? rc : rc2;
}

/* Everything else flushes first, then forwards: the file then looks as if every write had gone
 * straight through. */
#define FLUSH_OR_RETURN(f) do { int rc_ = wb_flush(f); if (rc_ != SQLITE_OK) return rc_; } while (0)
#define REAL(pf) (((wb_file *)(pf))->real)

static int wb_read(sqlite3_file *pf, void *p, int amt, sqlite3_int64 off) {
    FLUSH_OR_RETURN((wb_file *)pf);
    return REAL(pf)->pMethods->xRead(REAL(pf), p, amt, off);
}
static int wb_truncate(sqlite3_file *pf, sqlite3_int64 size) {
    FLUSH_OR_RETURN((wb_file *)pf);
    return REAL(pf)->pMethods->xTruncate(REAL(pf), size);
}
static int wb_sync(sqlite3_file *pf, int flags) {
    FLUSH_OR_RETURN((wb_file *)pf);
    return REAL(pf)->pMethods->xSync(REAL(pf), flags);
}
static int wb_size(sqlite3_file *pf, sqlite3_int64 *size) {
    FLUSH_OR_RETURN((wb_file *)pf);
    return REAL(pf)->pMethods->xFileSize(REAL(pf), size);
}
static int wb_lock(sqlite3_file *pf, int lock) { return REAL(pf)->pMethods->xLock(REAL(pf), lock); }
static int wb_unlock(sqlite3_file *pf, int lock) { return REAL(pf)->pMethods->xUnlock(REAL(pf), lock); }
static int wb_reserved(sqlite3_file *pf, int *out) { return REAL(pf)->pMethods->xCheckReservedLock(REAL(pf), out); }
static int wb_fcntl(sqlite3_file *pf, int op, void *arg) {
    FLUSH_OR_RETURN((wb_file *)pf);
    return REAL(pf)->pMethods->xFileControl(REAL(pf), op, arg);
}
static int wb_sector(sqlite3_file *pf) { return REAL(pf)->pMethods->xSectorSize(REAL(pf)); }
static int wb_device(sqlite3_file *pf) { return REAL(pf)->pMethods->xDeviceCharacteristics(REAL(pf)); }
static int wb_shm_map(sqlite3_file *pf, int pg, int sz, int extend, void volatile **pp) {
    return REAL(pf)->pMethods->xShmMap(REAL(pf), pg, sz, extend, pp);
}
static int wb_shm_lock(sqlite3_file *pf, int offset, int n, int flags) {
    return REAL(pf)->pMethods->xShmLock(REAL(pf), offset, n, flags);
}
static void wb_shm_barrier(sqlite3_file *pf) { REAL(pf)->pMethods->xShmBarrier(REAL(pf)); }
static int wb_shm_unmap(sqlite3_file *pf, int del) { return REAL(pf)->pMethods->xShmUnmap(REAL(pf), del); }
static int wb_fetch(sqlite3_file *pf, sqlite3_int64 off, int amt, void **pp) {
    FLUSH_OR_RETURN((wb_file *)pf);
    return REAL(pf)->pMethods->xFetch(REAL(pf), off, amt, pp);
}
static int wb_unfetch(sqlite3_file *pf, sqlite3_int64 off, void *p) {
    return REAL(pf)->pMethods->xUnfetch(REAL(pf), off, p);
}

/* Sub-journals in memory, in one buffer kept for the thread.
 *
 * Why: a savepoint (every db.* write inside a Lua transaction, every part of a group commit) and a
 * multi-row statement that may abort (any function call, such as the json_extract of an
 * expression index) make SQLite copy each page before its first change into a sub-journal, so
 * that the part can be rolled back alone. With temp_store=MEMORY that journal is SQLite's own
 * in-memory file, kept in 1 KiB chunks: about five malloc/free pairs per page, and the chunks
 * are freed at every release. A bulk delete copies thousands of pages per statement that way:
 * in the W6 cleanup job (100,000 posts with their comments and reactions) malloc and free took
 * 13 of its 136 µs of CPU per post. With a file-backed temp store SQLite keeps the first 64 KiB
 * in one chunk, then writes the journal to a temporary file, two system calls per page (W2's
 * creates measured 16 pwrite calls each that way). This VFS serves that file from memory
 * instead: a buffer that grows by doubling (realloc; large blocks are remapped, not copied) and
 * that the thread keeps, up to SJ_KEEP_MAX, for its next sub-journal, so journaling a page is
 * one memcpy. W6 then spent 6.5 µs per post in malloc and free and 8-11% less CPU in all.
 * Connections that write open with temp_store=FILE (MoonbaseSQLite's Connection); read-only ones
 * keep MEMORY. A writer's other temporary files (a sort or temporary table larger than its page
 * cache) go to the default VFS, as SQLite makes them.
 *
 * Why it is safe: a sub-journal lives only for its transaction on its connection (SQLite closes
 * it when the transaction ends and deletes it on close anyway) and a connection is used by one
 * thread at a time; nothing else ever opens it. Reads past the end return zeros and
 * SQLITE_IOERR_SHORT_READ like a real file; out of memory is SQLITE_IOERR_NOMEM, which fails the
 * statement, as a failed temporary-file write would. */
#define SJ_KEEP_MAX (8u * 1024 * 1024)   /* larger buffers are freed on close, not kept (memory) */

typedef struct sj_file {
    sqlite3_file base;
    unsigned char *buf;
    size_t cap;
    size_t size;
} sj_file;
/* A sub-journal lives in the memory SQLite reserves per file (szOsFile, sized for a wb_file). */
_Static_assert(sizeof(sj_file) <= sizeof(wb_file), "sj_file must fit in the VFS's file size");

static sqlite3_io_methods sj_io;
static _Atomic uint64_t st_sj_opens, st_sj_bytes;

/* The thread's kept buffer, freed when the thread exits (job threads come and go). */
typedef struct sj_spare { unsigned char *buf; size_t cap; } sj_spare;
static pthread_key_t sj_key;
static int sj_key_ok;
static void sj_spare_free(void *p) {
    sj_spare *k = p;
    free(k->buf);
    free(k);
}
static sj_spare *sj_thread_spare(void) {
    if (!sj_key_ok) return NULL;
    sj_spare *k = pthread_getspecific(sj_key);
    if (!k && (k = calloc(1, sizeof *k)) && pthread_setspecific(sj_key, k) != 0) {
        free(k);
        k = NULL;
    }
    return k;
}

static int sj_close(sqlite3_file *pf) {
    sj_file *f = (sj_file *)pf;
    sj_spare *k = f->buf && f->cap <= SJ_KEEP_MAX ? sj_thread_spare() : NULL;
    if (k && f->cap > k->cap) {
        free(k->buf);
        k->buf = f->buf;
        k->cap = f->cap;
    } else {
        free(f->buf);
    }
    f->buf = NULL;
    f->cap = f->size = 0;
    return SQLITE_OK;
}

static int sj_read(sqlite3_file *pf, void *p, int amt, sqlite3_int64 off) {
    sj_file *f = (sj_file *)pf;
    size_t have = off < 0 || (size_t)off >= f->size ? 0 : f->size - (size_t)off;
    size_t n = (size_t)amt < have ? (size_t)amt : have;
    if (n) memcpy(p, f->buf + off, n);
    if (n < (size_t)amt) {
        memset((unsigned char *)p + n, 0, (size_t)amt - n);
        return SQLITE_IOERR_SHORT_READ;
    }
    return SQLITE_OK;
}

static int sj_write(sqlite3_file *pf, const void *p, int amt, sqlite3_int64 off) {
    sj_file *f = (sj_file *)pf;
    if (off < 0 || amt < 0) return SQLITE_IOERR_WRITE;
    size_t end = (size_t)off + (size_t)amt;
    if (end > f->cap) {
        size_t cap = f->cap ? f->cap : 256 * 1024;
        while (cap < end) cap *= 2;
        unsigned char *b = realloc(f->buf, cap);
        if (!b) return SQLITE_IOERR_NOMEM;
        f->buf = b;
        f->cap = cap;
    }
    if ((size_t)off > f->size) memset(f->buf + f->size, 0, (size_t)off - f->size);
    memcpy(f->buf + off, p, (size_t)amt);
    if (end > f->size) f->size = end;
    atomic_fetch_add_explicit(&st_sj_bytes, (uint64_t)amt, memory_order_relaxed);
    return SQLITE_OK;
}

static int sj_truncate(sqlite3_file *pf, sqlite3_int64 size) {
    sj_file *f = (sj_file *)pf;
    if (size >= 0 && (size_t)size < f->size) f->size = (size_t)size;
    return SQLITE_OK;
}
static int sj_sync(sqlite3_file *pf, int flags) { (void)pf; (void)flags; return SQLITE_OK; }
static int sj_size(sqlite3_file *pf, sqlite3_int64 *size) { *size = (sqlite3_int64)((sj_file *)pf)->size; return SQLITE_OK; }
static int sj_lock(sqlite3_file *pf, int lock) { (void)pf; (void)lock; return SQLITE_OK; }
static int sj_reserved(sqlite3_file *pf, int *out) { (void)pf; *out = 0; return SQLITE_OK; }
static int sj_fcntl(sqlite3_file *pf, int op, void *arg) { (void)pf; (void)op; (void)arg; return SQLITE_NOTFOUND; }
static int sj_sector(sqlite3_file *pf) { (void)pf; return 4096; }
static int sj_device(sqlite3_file *pf) { (void)pf; return 0; }

static int sj_open(sqlite3_file *pf, int *out_flags) {
    sj_file *f = (sj_file *)pf;
    memset(f, 0, sizeof *f);
    sj_spare *k = sj_thread_spare();
    if (k) {
        f->buf = k->buf;
        f->cap = k->cap;
        k->buf = NULL;
        k->cap = 0;
    }
    f->base.pMethods = &sj_io;
    if (out_flags) *out_flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_SUBJOURNAL;
    atomic_fetch_add_explicit(&st_sj_opens, 1, memory_order_relaxed);
    return SQLITE_OK;
}

static int wb_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *pf, int flags, int *out_flags) {
    (void)vfs;
    if (flags & SQLITE_OPEN_SUBJOURNAL) return sj_open(pf, out_flags);
    if (!(flags & SQLITE_OPEN_WAL)) {
        /* Not a WAL file: the default VFS's own file, in place (szOsFile covers it). */
        return wb_base->xOpen(wb_base, name, pf, flags, out_flags);
    }
    wb_file *f = (wb_file *)pf;
    memset(f, 0, sizeof *f);
    f->real = (sqlite3_file *)(f + 1);
    int rc = wb_base->xOpen(wb_base, name, f->real, flags, out_flags);
    /* SQLite calls xClose whenever pMethods is set, even after a failed open: forward it exactly
     * when the default VFS set its own. */
    f->base.pMethods = f->real->pMethods ? &wb_io : NULL;
    return rc;
}

/* The rest of the VFS is the default one's. */
static int wb_delete(sqlite3_vfs *v, const char *z, int sync) { (void)v; return wb_base->xDelete(wb_base, z, sync); }
static int wb_access(sqlite3_vfs *v, const char *z, int flags, int *out) { (void)v; return wb_base->xAccess(wb_base, z, flags, out); }
static int wb_fullpath(sqlite3_vfs *v, const char *z, int n, char *out) { (void)v; return wb_base->xFullPathname(wb_base, z, n, out); }
static void *wb_dlopen(sqlite3_vfs *v, const char *z) { (void)v; return wb_base->xDlOpen(wb_base, z); }
static void wb_dlerror(sqlite3_vfs *v, int n, char *z) { (void)v; wb_base->xDlError(wb_base, n, z); }
static void (*wb_dlsym(sqlite3_vfs *v, void *h, const char *z))(void) { (void)v; return wb_base->xDlSym(wb_base, h, z); }
static void wb_dlclose(sqlite3_vfs *v, void *h) { (void)v; wb_base->xDlClose(wb_base, h); }
static int wb_random(sqlite3_vfs *v, int n, char *z) { (void)v; return wb_base->xRandomness(wb_base, n, z); }
static int wb_sleep(sqlite3_vfs *v, int us) { (void)v; return wb_base->xSleep(wb_base, us); }
static int wb_time(sqlite3_vfs *v, double *t) { (void)v; return wb_base->xCurrentTime(wb_base, t); }
static int wb_lasterr(sqlite3_vfs *v, int n, char *z) { (void)v; return wb_base->xGetLastError ? wb_base->xGetLastError(wb_base, n, z) : 0; }
static int wb_time64(sqlite3_vfs *v, sqlite3_int64 *t) { (void)v; return wb_base->xCurrentTimeInt64(wb_base, t); }
static int wb_setsys(sqlite3_vfs *v, const char *z, sqlite3_syscall_ptr p) { (void)v; return wb_base->xSetSystemCall(wb_base, z, p); }
static sqlite3_syscall_ptr wb_getsys(sqlite3_vfs *v, const char *z) { (void)v; return wb_base->xGetSystemCall(wb_base, z); }
static const char *wb_nextsys(sqlite3_vfs *v, const char *z) { (void)v; return wb_base->xNextSystemCall(wb_base, z); }

static pthread_once_t wb_once = PTHREAD_ONCE_INIT;
static int wb_rc = SQLITE_ERROR;

static void wb_register_once(void) {
    if (sqlite3_initialize() != SQLITE_OK) return;
    wb_base = sqlite3_vfs_find(NULL);
    /* Version 3 VFS and io methods are what the default unix VFS has had since SQLite 3.7.16. */
    if (!wb_base || wb_base->iVersion < 3) return;
    wb_io = (sqlite3_io_methods){
        .iVersion = 3, .xClose = wb_close, .xRead = wb_read, .xWrite = wb_write,
        .xTruncate = wb_truncate, .xSync = wb_sync, .xFileSize = wb_size, .xLock = wb_lock,
        .xUnlock = wb_unlock, .xCheckReservedLock = wb_reserved, .xFileControl = wb_fcntl,
        .xSectorSize = wb_sector, .xDeviceCharacteristics = wb_device, .xShmMap = wb_shm_map,
        .xShmLock = wb_shm_lock, .xShmBarrier = wb_shm_barrier, .xShmUnmap = wb_shm_unmap,
        .xFetch = wb_fetch, .xUnfetch = wb_unfetch,
    };
    sj_key_ok = pthread_key_create(&sj_key, sj_spare_free) == 0;
    sj_io = (sqlite3_io_methods){
        .iVersion = 1, .xClose = sj_close, .xRead = sj_read, .xWrite = sj_write,
        .xTruncate = sj_truncate, .xSync = sj_sync, .xFileSize = sj_size, .xLock = sj_lock,
        .xUnlock = sj_lock, .xCheckReservedLock = sj_reserved, .xFileControl = sj_fcntl,
        .xSectorSize = sj_sector, .xDeviceCharacteristics = sj_device,
    };
    wb_vfs = (sqlite3_vfs){
        .iVersion = 3, .szOsFile = (int)sizeof(wb_file) + wb_base->szOsFile,
        .mxPathname = wb_base->mxPathname, .zName = "moonbase", .xOpen = wb_open,
        .xDelete = wb_delete, .xAccess = wb_access, .xFullPathname = wb_fullpath,
        .xDlOpen = wb_dlopen, .xDlError = wb_dlerror, .xDlSym = wb_dlsym, .xDlClose = wb_dlclose,
        .xRandomness = wb_random, .xSleep = wb_sleep, .xCurrentTime = wb_time,
        .xGetLastError = wb_lasterr, .xCurrentTimeInt64 = wb_time64,
        .xSetSystemCall = wb_setsys, .xGetSystemCall = wb_getsys, .xNextSystemCall = wb_nextsys,
    };
    wb_rc = sqlite3_vfs_register(&wb_vfs, 0);
}

int mb_walbuf_register(void) {
    pthread_once(&wb_once, wb_register_once);
    return wb_rc;
}

const char *mb_walbuf_name(void) {
    return mb_walbuf_register() == SQLITE_OK ? wb_vfs.zName : NULL;
}

mb_walbuf_stats mb_walbuf_get_stats(void) {
    return (mb_walbuf_stats){
        atomic_load_explicit(&st_frames, memory_order_relaxed),
        atomic_load_explicit(&st_flushes, memory_order_relaxed),
        atomic_load_explicit(&st_passed, memory_order_relaxed),
        atomic_load_explicit(&st_sj_opens, memory_order_relaxed),
        atomic_load_explicit(&st_sj_bytes, memory_order_relaxed),
    };
}

int mb_walbuf_file_stats(sqlite3 *db, mb_walbuf_stats *out) {
    sqlite3_file *wal = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) != SQLITE_OK) return 0;
    if (!wal || wal->pMethods != &wb_io) return 0;
    *out = ((wb_file *)wal)->stats;
    return 1;
}
