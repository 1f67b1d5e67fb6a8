/* ah_size.c: size bins and sizes as text (base/ah_size.h).
 *
 * Size bins are powers of two of bytes per rank, so AllGather and ReduceScatter of the same per-rank
 * share land in the same bin whatever the communicator's size. */
#include <ctype.h>
#include <stdio.h>

#include "ah_size.h"
#include "autoha/nccl_tuner_abi.h" /* AH_FUNC_ALLGATHER, AH_FUNC_REDUCESCATTER */

int ah_size_bin(int coll, size_t nbytes, int nranks) {
  size_t per_rank = nbytes;
  if ((coll == AH_FUNC_ALLGATHER || coll == AH_FUNC_REDUCESCATTER) && nranks > 1)
    per_rank = nbytes / (size_t)nranks;
  int bin = 0;
  while (per_rank > 1) {
    per_rank >>= 1;
    bin++;
  }
  return bin;
}

size_t ah_size_bin_floor(int bin) {
  if (bin <= 0) return 0;
  if (bin >= (int)(8 * sizeof(size_t))) return (size_t)-1;
  return (size_t)1 << bin;
}

int ah_size_parse(const char *s, size_t len, uint64_t *v_p) {
  if (!s || len == 0 || !isdigit((unsigned char)s[0])) return -1;
  uint64_t v = 0;
  size_t i = 0;
  for (; i < len && isdigit((unsigned char)s[i]); i++) {
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  unsigned shift = 0;
  if (i < len) {
    switch (toupper((unsigned char)s[i])) {
      case 'K':
        shift = 10;
        i++;
        break;
      case 'M':
        shift = 20;
        i++;
        break;
      case 'G':
        shift = 30;
        i++;
        break;
      default: break;
    }
    if (shift && i < len && (s[i] == 'i' || s[i] == 'I')) i++;
    if (i < len && toupper((unsigned char)s[i]) == 'B') i++;
  }
  if (i != len) return -1;
  if (shift && v > (UINT64_MAX >> shift)) return -1;
  *v_p = v << shift;
  return 0;
}

char *ah_size_format(uint64_t v, char *buf, size_t len) {
  static const char units[] = {'G', 'M', 'K'};
  for (int i = 0; i < 3; i++) {
    unsigned shift = (unsigned)(30 - 10 * i);
    uint64_t unit = (uint64_t)1 << shift;
    if (v && v % unit == 0) {
      snprintf(buf, len, "%llu%c", (unsigned long long)(v >> shift), units[i]);
      return buf;
    }
  }
  snprintf(buf, len, "%llu", (unsigned long long)v);
  return buf;
}
