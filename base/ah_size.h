/* ah_size.h: sizes as autoha reads and writes them — a call's size bin (the key's third part) and
 * byte counts as text with K/M/G suffixes (overrides, the env table, reports, findings). */
#ifndef AH_SIZE_H
#define AH_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Size bin of a call: floor(log2(bytes per rank)), with bytes per rank = nbytes / nranks for
 * AllGather and ReduceScatter (NCCL passes the total buffer for those) and nbytes otherwise.
 * 0 bytes is bin 0. Returns the bin. */
int ah_size_bin(int coll, size_t nbytes, int nranks);
/* Lower bound, in bytes per rank, of a bin. */
size_t ah_size_bin_floor(int bin);

/* Parses a size with an optional K/M/G (binary) and B suffix, case-insensitive, from s[0..len).
 * Returns 0 and sets *v_p, or -1 (bad syntax or overflow) leaving *v_p alone. Shared with the env
 * table's size-typed variables. */
int ah_size_parse(const char *s, size_t len, uint64_t *v_p);
/* Formats a size the short way ("512", "64K", "1M", "3G"; exact multiples only, else bytes).
 * Returns buf. */
char *ah_size_format(uint64_t v, char *buf, size_t len);

#endif
