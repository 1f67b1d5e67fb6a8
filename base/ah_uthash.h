/* ah_uthash.h: uthash as autoha uses it — every file of libautoha.so includes this, never uthash.h.
 * uthash's default out-of-memory handler calls exit(), and a preloaded library must never end the
 * user's process, so its non-fatal mode is on: an add that cannot allocate is refused (the table is
 * left as it was, without the item) and the caller carries on without the entry, as it does when
 * its own calloc fails. tests/shim/check_exports.sh fails if libautoha.so imports exit or abort. */
#ifndef AH_UTHASH_H
#define AH_UTHASH_H

#ifdef UTHASH_H
#error "uthash.h was included before ah_uthash.h: its fatal out-of-memory handler would call exit()"
#endif
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

/* Whether the item the last HASH_ADD* named is now in its table: 0 when uthash ran out of memory
 * and refused it (uthash then leaves the item's table pointer NULL; the caller still owns it). */
#define AH_HASH_ADDED(item) ((item)->hh.tbl != NULL)

#endif
