/* The coordinator's wire format: an 8-byte header (payload length, protocol version, message type,
 * zero reserved bits) and a fixed-size big-endian payload per type, plus the HMAC-SHA256 proofs of
 * the handshake (ah_coord_sha256.c) and their random nonces (getrandom). Every length is checked against the exact size of its type
 * before a byte of payload is read, so a 16 MiB prefix costs the hub nothing but a log line. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "ah_coord_audit.h"
#include "ah_coord_internal.h"
#include "ah_coord_link.h"
#include "ah_coord_nic.h"
#include "ah_coord_sha256.h"
#include "ah_coord_status.h"

uint64_t ah_coord_fnv64(const void *p, size_t n, uint64_t h) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

void ah_coord_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 7; i >= 0; i--) {
    p[i] = (uint8_t)(v & 0xff);
    v >>= 8;
  }
}

uint64_t ah_coord_get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
  return v;
}

void ah_coord_put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

uint32_t ah_coord_get_u32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

void ah_coord_put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}

uint16_t ah_coord_get_u16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

int ah_coord_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

static const uint32_t msg_lens[AH_MSG_MAX + 1] = {
    [AH_MSG_HELLO] = AH_COORD_NONCE_BYTES,
    [AH_MSG_AUTH] = AH_COORD_NONCE_BYTES + 8 + AH_COORD_MAC_BYTES,
    [AH_MSG_WELCOME] = AH_COORD_MAC_BYTES + 8,
    [AH_MSG_JOIN] = 8 + 4 + 4 + 8 + 8 * AH_COORD_DIGEST_PARTS,
    [AH_MSG_LEAVE] = 8,
    [AH_MSG_PUBLISH] = 8 + AH_COORD_KEYSEG_BYTES,
    [AH_MSG_ACK] = 8,
    [AH_MSG_SEGMENT] = 8 + AH_COORD_KEYSEG_BYTES,
    [AH_MSG_PING] = 0,
    [AH_MSG_PONG] = 0,
    [AH_MSG_VERDICT] = 8 + 4 + 4 * 4,
    [AH_MSG_DELIVERED] = 8 + 8,
    [AH_MSG_PROGRESS] = 8 + AH_HEALTH_REC_BYTES,
    [AH_MSG_FINDING] = 8 + AH_FINDING_BYTES,
    [AH_MSG_STATUS] = 0,
    [AH_MSG_STATUS_COMM] = AH_STATUS_COMM_BYTES,
    [AH_MSG_STATUS_RANK] = AH_STATUS_RANK_BYTES,
    [AH_MSG_STATUS_END] = 4,
    [AH_MSG_SAMPLES] = 8 + AH_HEALTH_SAMPLES_BYTES,
    [AH_MSG_DIR_PUT] = AH_COORD_DIR_PUT_FIXED,
    [AH_MSG_DIR_GET] = AH_COORD_DIR_GET_BYTES,
    [AH_MSG_DIR_VAL] = AH_COORD_DIR_VAL_FIXED,
    [AH_MSG_SEARCH_TIME] = 8 + 4 + 1 + 1 + 8 + 4,
    [AH_MSG_MIN_TIME] = 8 + 1 + 1 + 8 + 4 + 4 + 4,
    [AH_MSG_RELAY_OPEN] = AH_COORD_RELAY_FIXED,
    [AH_MSG_RELAY_DATA] = AH_COORD_RELAY_FIXED + AH_COORD_HDR_BYTES,
    [AH_MSG_RELAY_CLOSE] = AH_COORD_RELAY_FIXED,
    [AH_MSG_DIR_ABSENT] = AH_COORD_DIR_ABSENT_BYTES,
    [AH_MSG_LINK_QP] = AH_LINK_QP_MSG_BYTES,
    [AH_MSG_LINK_RATES] = AH_LINK_RATE_MSG_BYTES,
    [AH_MSG_BYE] = 0,
    [AH_MSG_AUDIT] = 8 + AH_AUDIT_BYTES,
    [AH_MSG_NIC_PORT] = AH_NIC_PORT_BYTES,
    [AH_MSG_RECONNECT] = 0,
};
_Static_assert(AH_LINK_QP_MSG_BYTES <= AH_COORD_MAX_INNER &&
                   AH_LINK_RATE_MSG_BYTES <= AH_COORD_MAX_INNER,
               "the link messages fit the frame bound");
/* Types whose payload ends in a value of 0..AH_COORD_DIR_VAL_MAX bytes after msg_lens[type]. */
static int msg_has_value(uint8_t type) { return type == AH_MSG_DIR_PUT || type == AH_MSG_DIR_VAL; }
_Static_assert(8 + AH_FINDING_BYTES <= AH_COORD_MAX_INNER, "a finding fits the frame bound");

uint32_t ah_coord_msg_len(uint8_t type) {
  return type >= 1 && type <= AH_MSG_MAX ? msg_lens[type] : 0;
}

void ah_coord_hdr_encode(uint8_t type, uint32_t len, uint8_t out[AH_COORD_HDR_BYTES]) {
  ah_coord_put_u32(out, len);
  out[4] = AH_COORD_PROTO_VERSION;
  out[5] = type;
  out[6] = out[7] = 0;
}

/* Returns 0, or -1 with err naming the offending field. Note that the length is checked twice:
 * against the global bound (so the message can say "oversized") and against the exact length of
 * the type (so a frame cannot smuggle trailing bytes). */
int ah_coord_hdr_decode(const uint8_t in[AH_COORD_HDR_BYTES], ah_coord_hdr_t *h_p, char *err,
                        size_t errlen) {
  ah_coord_hdr_t h = {.len = ah_coord_get_u32(in),
                      .version = in[4],
                      .type = in[5],
                      .reserved = (uint16_t)((in[6] << 8) | in[7])};
  if (h.version != AH_COORD_PROTO_VERSION) {
    snprintf(
        err, errlen,
        "wrong protocol version %u (expected %u; header bytes %02x%02x%02x%02x%02x%02x%02x%02x)",
        h.version, AH_COORD_PROTO_VERSION, in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7]);
    return -1;
  }
  if (h.len > AH_COORD_MAX_PAYLOAD) {
    snprintf(err, errlen, "oversized frame: length prefix %u exceeds the bound of %u bytes", h.len,
             AH_COORD_MAX_PAYLOAD);
    return -1;
  }
  if (h.type < 1 || h.type > AH_MSG_MAX || h.reserved != 0) {
    snprintf(err, errlen, "unknown message type %u (reserved bits 0x%04x)", h.type, h.reserved);
    return -1;
  }
  if (h.type == AH_MSG_RELAY_DATA &&
      (h.len < msg_lens[h.type] || h.len > msg_lens[h.type] + AH_COORD_MAX_INNER)) {
    snprintf(err, errlen, "message type %u with length %u (expected %u..%u)", h.type, h.len,
             msg_lens[h.type], msg_lens[h.type] + AH_COORD_MAX_INNER);
    return -1;
  }
  if (h.type != AH_MSG_RELAY_DATA && h.len > AH_COORD_MAX_INNER) {
    snprintf(err, errlen, "oversized frame: length prefix %u exceeds the bound of %u bytes", h.len,
             AH_COORD_MAX_INNER);
    return -1;
  }
  if (msg_has_value(h.type) &&
      (h.len < msg_lens[h.type] || h.len > msg_lens[h.type] + AH_COORD_DIR_VAL_MAX)) {
    snprintf(err, errlen, "message type %u with length %u (expected %u..%u)", h.type, h.len,
             msg_lens[h.type], msg_lens[h.type] + AH_COORD_DIR_VAL_MAX);
    return -1;
  }
  if (!msg_has_value(h.type) && h.type != AH_MSG_RELAY_DATA && h.len != msg_lens[h.type]) {
    snprintf(err, errlen, "message type %u with length %u (expected %u)", h.type, h.len,
             msg_lens[h.type]);
    return -1;
  }
  *h_p = h;
  return 0;
}

void ah_coord_time_pack(uint8_t type, const ah_coord_time_t *t, uint8_t *out) {
  uint8_t *p = out;
  uint32_t bits;
  memcpy(&bits, &t->us, 4);
  ah_coord_put_u64(p, t->comm), p += 8;
  if (type == AH_MSG_SEARCH_TIME) ah_coord_put_u32(p, t->rank), p += 4;
  *p++ = t->coll;
  *p++ = t->bin;
  ah_coord_put_u64(p, t->index), p += 8;
  ah_coord_put_u32(p, bits), p += 4;
  if (type == AH_MSG_MIN_TIME) {
    ah_coord_put_u32(p, t->reported), p += 4;
    ah_coord_put_u32(p, t->nranks);
  }
}

int ah_coord_time_unpack(uint8_t type, const uint8_t *in, ah_coord_time_t *t_p, char *err,
                         size_t errlen) {
  ah_coord_time_t t;
  memset(&t, 0, sizeof t);
  const uint8_t *p = in;
  t.comm = ah_coord_get_u64(p), p += 8;
  if (type == AH_MSG_SEARCH_TIME) t.rank = ah_coord_get_u32(p), p += 4;
  t.coll = *p++;
  t.bin = *p++;
  t.index = ah_coord_get_u64(p), p += 8;
  uint32_t bits = ah_coord_get_u32(p);
  p += 4;
  memcpy(&t.us, &bits, 4);
  if (type == AH_MSG_MIN_TIME) {
    t.reported = ah_coord_get_u32(p), p += 4;
    t.nranks = ah_coord_get_u32(p);
  }
  if (t.coll >= AH_NUM_FUNCTIONS || t.bin > 63) {
    snprintf(err, errlen, "search time of a key out of range (coll %u, bin %u)", t.coll, t.bin);
    return -1;
  }
  if (!isfinite(t.us) || t.us < 0) {
    snprintf(err, errlen, "search time of call %llu is %g us (expected a finite duration >= 0)",
             (unsigned long long)t.index, (double)t.us);
    return -1;
  }
  if (type == AH_MSG_MIN_TIME && (t.reported == 0 || t.reported > t.nranks)) {
    snprintf(err, errlen, "shortest time of call %llu over %u of %u ranks",
             (unsigned long long)t.index, t.reported, t.nranks);
    return -1;
  }
  *t_p = t;
  return 0;
}

/* Note that the value length is carried twice (the frame's length prefix and the u16), so a frame
 * whose two disagree is malformed: refused by name, never read past its end. */
int ah_coord_dir_vlen(const uint8_t *p, uint32_t len, uint32_t at, char *err, size_t errlen) {
  uint32_t v = ((uint32_t)p[at] << 8) | p[at + 1];
  if (v > AH_COORD_DIR_VAL_MAX || (uint64_t)at + 2 + v != len) {
    snprintf(err, errlen,
             "value length %u does not match the %u bytes the frame carries after its "
             "%u-byte head (at most %u)",
             v, len >= at + 2 ? len - at - 2 : 0, at + 2, AH_COORD_DIR_VAL_MAX);
    return -1;
  }
  return (int)v;
}

void ah_coord_keyseg_pack(const ah_key_t *k, const ah_segment_t *s, uint8_t *out) {
  uint8_t *p = out;
  ah_coord_put_u64(p, k->comm), p += 8;
  ah_coord_put_u32(p, (uint32_t)k->coll), p += 4;
  ah_coord_put_u32(p, (uint32_t)k->bin), p += 4;
  ah_coord_put_u64(p, s->first), p += 8;
  ah_coord_put_u64(p, s->count), p += 8;
  *p++ = (uint8_t)s->config.algo;
  *p++ = (uint8_t)s->config.proto;
  ah_coord_put_u32(p, (uint32_t)s->config.ndims), p += 4;
  for (int i = 0; i < AH_MAX_DIMS; i++) ah_coord_put_u64(p, (uint64_t)s->config.res[i]), p += 8;
  ah_coord_put_u32(p, (uint32_t)s->source);
}

int ah_coord_keyseg_unpack(const uint8_t *in, ah_key_t *k_p, ah_segment_t *s_p, char *err,
                           size_t errlen) {
  ah_key_t k;
  ah_segment_t s;
  memset(&k, 0, sizeof k);
  memset(&s, 0, sizeof s);
  const uint8_t *p = in;
  k.comm = ah_coord_get_u64(p), p += 8;
  k.coll = (int32_t)ah_coord_get_u32(p), p += 4;
  k.bin = (int32_t)ah_coord_get_u32(p), p += 4;
  s.first = ah_coord_get_u64(p), p += 8;
  s.count = ah_coord_get_u64(p), p += 8;
  s.config.algo = (int8_t)*p++;
  s.config.proto = (int8_t)*p++;
  s.config.ndims = (int32_t)ah_coord_get_u32(p), p += 4;
  for (int i = 0; i < AH_MAX_DIMS; i++) s.config.res[i] = (int64_t)ah_coord_get_u64(p), p += 8;
  s.source = (int32_t)ah_coord_get_u32(p);
  if (k.coll < 0 || k.coll >= AH_NUM_FUNCTIONS || k.bin < 0 || k.bin > 63) {
    snprintf(err, errlen, "segment key out of range (coll %d, bin %d)", k.coll, k.bin);
    return -1;
  }
  if (s.config.algo < -1 || s.config.algo >= AH_NUM_ALGOS || s.config.proto < -1 ||
      s.config.proto >= AH_NUM_PROTOS || s.config.ndims < 0 || s.config.ndims > AH_MAX_DIMS) {
    snprintf(err, errlen, "segment config out of range (algo %d, proto %d, ndims %d)",
             s.config.algo, s.config.proto, s.config.ndims);
    return -1;
  }
  for (int i = 0; i < AH_MAX_DIMS; i++)
    if (s.config.res[i] < 0) {
      snprintf(err, errlen, "segment config resource %d is negative (%lld)", i,
               (long long)s.config.res[i]);
      return -1;
    }
  if (s.source < AH_SOURCE_DEFAULT || s.source > AH_SOURCE_TUNED) {
    snprintf(err, errlen, "segment source %d out of range", s.source);
    return -1;
  }
  if (s.count != AH_SCHED_FOREVER && s.first + s.count < s.first) {
    snprintf(err, errlen, "segment [%llu, +%llu) overflows", (unsigned long long)s.first,
             (unsigned long long)s.count);
    return -1;
  }
  *k_p = k;
  *s_p = s;
  return 0;
}

/* Note that the label differs per direction ("autoha-client"/"autoha-hub") and both nonces enter
 * each proof, so neither a reflected nor a replayed proof verifies. Returns 0, or -1 once the
 * process is exiting (callers then refuse the handshake: a zero MAC must never verify). */
/* Set by an atexit handler: from then on the coordinator's threads start and answer no handshake
 * (they may still be running while exit() tears the process down). */
static atomic_int crypto_exiting;

static void crypto_atexit(void) { atomic_store(&crypto_exiting, 1); }

static void crypto_init_once(void) { atexit(crypto_atexit); }

void ah_coord_crypto_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, crypto_init_once);
}

int ah_coord_exiting(void) { return atomic_load(&crypto_exiting); }

int ah_coord_mac(const uint8_t secret[16], const char *label, const uint8_t a[32],
                 const uint8_t b[32], uint64_t v, uint8_t out[32]) {
  uint8_t msg[32 + 32 + 32 + 8];
  size_t ll = strlen(label);
  if (ll > 32) ll = 32;
  memset(msg, 0, 32);
  memcpy(msg, label, ll);
  memcpy(msg + 32, a, 32);
  memcpy(msg + 64, b, 32);
  ah_coord_put_u64(msg + 96, v);
  if (ah_coord_exiting()) {
    memset(out, 0, 32);
    return -1;
  }
  ah_coord_hmac_sha256(secret, 16, msg, sizeof msg, out);
  return 0;
}

int ah_coord_mac_equal(const uint8_t a[32], const uint8_t b[32]) {
  uint8_t diff = 0; /* every byte compared, whatever differs first: no timing to learn from */
  for (int i = 0; i < 32; i++) diff |= (uint8_t)(a[i] ^ b[i]);
  return diff == 0;
}

int ah_coord_random(void *buf, size_t n) {
  if (ah_coord_exiting()) return -1;
  for (size_t got = 0; got < n;) { /* the kernel's CSPRNG; EINTR only before a byte is read */
    ssize_t r = getrandom((uint8_t *)buf + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}
