/* ah_cluster_b64.h: standard base64 (RFC 4648, with padding), the form etcd's JSON gateway gives
 * every key and value in. */
#ifndef AH_CLUSTER_B64_H
#define AH_CLUSTER_B64_H

#include <stddef.h>

/* The encoded length of n bytes, without the terminating NUL. */
size_t ah_cluster_b64_len(size_t n);

/* Encodes n bytes of `in` into out (ah_cluster_b64_len(n) + 1 bytes), NUL-terminated. */
void ah_cluster_b64_encode(const void *in, size_t n, char *out);

/* Decodes the NUL-terminated `in` into out (room for strlen(in) / 4 * 3 + 1 bytes; a NUL is
 * added after the data, so text values read as strings). Returns the decoded length, or -1 when
 * `in` is not base64 (a byte outside the alphabet, a length not a multiple of 4, padding
 * anywhere but the end). */
long ah_cluster_b64_decode(const char *in, unsigned char *out);

#endif
