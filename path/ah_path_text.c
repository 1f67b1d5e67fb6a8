/* ah_path_text.c: the arithmetic and text every path piece shares — the kernel's flow-label ↔ UDP
 * source port arithmetic, the traffic-class rule, the switch hash model, GID and traffic-class
 * parsing, and the strict line-oriented text helpers of the catalog and topology parsers.
 *
 * The key choice: the hook never names a port directly; it writes the flow label that the kernel
 * folds into the wanted port (ah_path_sport_to_label), so it works on every RoCEv2 driver that
 * honours grh.flow_label, with no vendor API. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ah_file.h"
#include "ah_log.h"
#include "ah_path.h"
#include "ah_path_text.h"
#include "ah_uthash.h"

/* ---- kernel arithmetic ------------------------------------------------------------------------ */

uint16_t ah_path_label_to_sport(uint32_t label) {
  uint32_t lo = label & 0x03FFFu, hi = label & 0xFC000u;
  lo ^= hi >> 14;
  return (uint16_t)(lo | AH_PATH_SPORT_MIN);
}

uint32_t ah_path_sport_to_label(uint16_t sport) {
  if (sport < AH_PATH_SPORT_MIN) return 0;
  uint32_t lo = sport & 0x3FFFu;
  /* With the high six bits 0 the label is the port's low 14 bits; port 0xC000 would then need label
   * 0, which means "no label", so it is written as high bits 1 and low bits 1 (1 ^ 1 = 0). */
  return lo ? lo : ((1u << 14) | 1u);
}

uint32_t ah_path_label_from_qpn(uint32_t lqpn, uint32_t rqpn) {
  uint64_t v = (uint64_t)lqpn * rqpn;
  v ^= v >> 20;
  v ^= v >> 40;
  return (uint32_t)(v & AH_PATH_LABEL_MASK);
}

uint8_t ah_path_tc_with_dscp(uint8_t tc, unsigned dscp) {
  return (uint8_t)(((dscp & 0x3Fu) << 2) | (tc & 0x3u));
}

/* ---- hash model ------------------------------------------------------------------------------- */

/* CRC-32 (IEEE, reflected), table-driven: the planner hashes millions of candidate ports. */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static void crc_table_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int b = 0; b < 8; b++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    crc_table[i] = c;
  }
}

uint32_t ah_path_crc32_update(uint32_t crc, const uint8_t *p, size_t n) {
  pthread_once(&crc_once, crc_table_init);
  for (size_t i = 0; i < n; i++) crc = (crc >> 8) ^ crc_table[(crc ^ p[i]) & 0xFFu];
  return crc;
}

uint32_t ah_path_hash5_prefix(const uint8_t sgid[16], const uint8_t dgid[16]) {
  uint32_t c = ~0u;
  c = ah_path_crc32_update(c, sgid, 16);
  return ah_path_crc32_update(c, dgid, 16);
}

uint32_t ah_path_hash5_finish(uint32_t prefix, uint32_t seed, uint16_t sport) {
  uint8_t tail[5] = {17, (uint8_t)(sport >> 8), (uint8_t)sport, (uint8_t)(AH_PATH_ROCE_DPORT >> 8),
                     (uint8_t)AH_PATH_ROCE_DPORT};
  uint32_t c = ah_path_crc32_update(prefix, tail, sizeof tail);
  /* CRC-32 is linear, so CRCs that differ only in their seed are correlated (two switches would
   * then pick dependent paths: hash polarisation). The model mixes the seed in non-linearly
   * (MurmurHash3's finaliser), as switches with per-device hash seeds do. */
  uint32_t h = ~c ^ (seed * 0x9E3779B9u);
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

uint32_t ah_path_hash5(uint32_t seed, const uint8_t sgid[16], const uint8_t dgid[16],
                       uint16_t sport) {
  return ah_path_hash5_finish(ah_path_hash5_prefix(sgid, dgid), seed, sport);
}

uint16_t ah_path_spread_port(uint32_t pair_hash, unsigned k) {
  unsigned r = 0;
  for (int b = 0; b < 14; b++)
    if (k & (1u << b)) r |= 1u << (13 - b);
  return (uint16_t)(AH_PATH_SPORT_MIN | ((pair_hash + r) & 0x3FFFu));
}

int ah_path_gid_parse(const char *text, uint8_t gid_p[16]) {
  uint8_t g[16];
  struct in_addr a4;
  if (!text || !*text) return -1;
  if (inet_pton(AF_INET, text, &a4) == 1) {
    memset(g, 0, sizeof g);
    g[10] = g[11] = 0xFF;
    memcpy(g + 12, &a4, 4);
  } else if (inet_pton(AF_INET6, text, g) != 1) {
    return -1;
  }
  memcpy(gid_p, g, 16);
  return 0;
}

/* ---- small strict parsers --------------------------------------------------------------------- */

int ah_path_text_long(const char *s, long lo, long hi, long *v_p) {
  if (!s || !*s || isspace((unsigned char)*s)) return -1;
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (errno || *end || v < lo || v > hi) return -1;
  *v_p = v;
  return 0;
}

int ah_path_parse_tc(const char *text, int *tc_p, int *is_dscp_p) {
  long v;
  if (!text) return -1;
  if (strcasecmp(text, "nccl") == 0) {
    *tc_p = -1;
    *is_dscp_p = 0;
    return 0;
  }
  if (strncasecmp(text, "dscp=", 5) == 0) {
    if (ah_path_text_long(text + 5, 0, 63, &v)) return -1;
    *tc_p = (int)v;
    *is_dscp_p = 1;
    return 0;
  }
  if (ah_path_text_long(text, 0, 255, &v)) return -1;
  *tc_p = (int)v;
  *is_dscp_p = 0;
  return 0;
}

int ah_path_text_words(char *line, char **w, int max) {
  int n = 0;
  char *save = NULL;
  for (char *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
    if (n == max) return max + 1;
    w[n++] = t;
  }
  return n;
}

char *ah_path_text_line(char **cur, int *lineno_p, char *orig, unsigned orig_size) {
  char *line = *cur;
  if (!line || !*line) return NULL;
  char *nl = strchr(line, '\n');
  if (nl) {
    *nl = '\0';
    *cur = nl + 1;
  } else {
    *cur = line + strlen(line);
  }
  (*lineno_p)++;
  size_t len = strlen(line);
  if (len && line[len - 1] == '\r') line[len - 1] = '\0';
  snprintf(orig, orig_size, "%s", line);
  char *hash = strchr(line, '#');
  if (hash) *hash = '\0';
  return line;
}

char *ah_path_text_read(const char *path, const char *what) {
  char err[160];
  char *buf = ah_file_read(path, (size_t)64 << 20, NULL, err, sizeof err);
  if (!buf) ah_log(AH_LOG_ERROR, "cannot read %s '%s': %s", what, path, err);
  return buf;
}
