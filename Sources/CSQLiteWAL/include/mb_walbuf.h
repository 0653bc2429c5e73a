#ifndef MB_WALBUF_H
#define MB_WALBUF_H
#include <stdint.h>

/* A SQLite VFS, "moonbase", over the platform's default one: everything passes through except
 * the writes of WAL frames, which are gathered and written with one system call per commit, and
 * sub-journals, which are kept in memory (see mb_walbuf.c for why and for the rules that keep
 * both safe). Only MoonbaseSQLite imports this. */

/** Registers the VFS (once; later calls return the first result). SQLITE_OK or an error code. */
int mb_walbuf_register(void);

/** The VFS's name for sqlite3_open_v2, or NULL when registering failed (use the default VFS). */
const char *mb_walbuf_name(void);

typedef struct mb_walbuf_stats {
    uint64_t frames;    /* WAL frames that went through the buffer */
    uint64_t flushes;   /* writes of the buffer to the file */
    uint64_t passed;    /* WAL writes that were not frames in sequence, written as they came */
    uint64_t subjournals;       /* sub-journals opened in memory (process-wide counter only) */
    uint64_t subjournal_bytes;  /* bytes written to them (process-wide counter only) */
} mb_walbuf_stats;

/** Counters since the process started (all connections). */
mb_walbuf_stats mb_walbuf_get_stats(void);

struct sqlite3;
/** The counters of the WAL file `db` has open, if it goes through this VFS: 1 and *out set, else
 * 0. Call it on the thread using `db`. */
int mb_walbuf_file_stats(struct sqlite3 *db, mb_walbuf_stats *out);

#endif
