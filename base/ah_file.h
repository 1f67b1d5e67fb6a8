/* ah_file.h: reading a whole text file (a report, a profile, a path catalog, a topology file)
 * into memory, bounded in size, with an error text that says what went wrong. */
#ifndef AH_FILE_H
#define AH_FILE_H

#include <stddef.h>

/* Reads `path` whole, a regular file only (never blocking: a FIFO, a device or a folder is
 * refused before a byte is read, as is a file larger than max_bytes). Returns a NUL-terminated
 * buffer to free() and its length in *len_p (which may be NULL), or NULL with the reason in err
 * ("cannot open: …", "not a regular file (a FIFO)", "read error: …", "larger than N bytes",
 * "out of memory"). Note that the file may itself contain NUL bytes: callers that parse
 * text compare strlen() with the length. */
char *ah_file_read(const char *path, size_t max_bytes, size_t *len_p, char *err, size_t errlen);

/* Creates the folders leading to `path` that do not exist yet (mkdir -p of its directory).
 * Returns 0, or -1 with the reason in err. */
int ah_file_make_parents(const char *path, char *err, size_t errlen);

/* Writes len bytes of text to `path` atomically: the folders leading to it are created, the text
 * goes to "<path>.tmp.<pid>.<n>" (n unique per call) in the same folder, which is then renamed to
 * path, so a reader sees the old file or the new one, never half of one. Returns 0, or -1 with err
 * naming the failing call and the path (not logged: the caller logs once); the temporary file is
 * removed.
 *
 * Note that the temporary name ends in a number, never in the final name's suffix, so a reader
 * that picks files by suffix (node_exporter's textfile collector takes *.prom) never opens it. */
int ah_file_write_atomic(const char *path, const char *text, size_t len, char *err, size_t errlen);

#endif
