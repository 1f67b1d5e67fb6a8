/* Fuzz target: the coordinator's wire decoders without sockets — a stream of frames as the hub's
 * and the client's readers cut it (header check, then the payload of the exact length), each
 * payload through the decoder its type uses (key + segment, progress record and its classification,
 * samples and the straggler detector, the straggler audit, verdict, the directory's value lengths, search times, a relay
 * channel's frame header, the links' queue pairs and rates and the matrix they feed, u64 fields). */
#include <string.h>

#include "ah_coord_audit.h"
#include "ah_coord_internal.h"
#include "ah_coord_link.h"
#include "ah_coord_nic.h"
#include "ah_coord_linkmat.h"
#include "ah_coord_straggler.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[256];
  size_t off = 0;
  ah_strag_t *strag = ah_strag_new(3, 20); /* the input's samples, as a 3-rank communicator's */
  ah_lm_t *lm = ah_lm_new(4, NULL);        /* the input's rates, as a 4-rank communicator's */
  double lm_t = 0;
  while (size - off >= AH_COORD_HDR_BYTES) {
    ah_coord_hdr_t h;
    if (ah_coord_hdr_decode(data + off, &h, err, sizeof err) != 0) break;
    off += AH_COORD_HDR_BYTES;
    if (size - off < h.len) break;
    const uint8_t *p = data + off;
    ah_key_t k;
    ah_segment_t s;
    ah_health_rec_t rec;
    if (h.type == AH_MSG_PUBLISH || h.type == AH_MSG_SEGMENT)
      ah_coord_keyseg_unpack(p + 8, &k, &s, err, sizeof err);
    else if (h.type == AH_MSG_PROGRESS && ah_health_rec_unpack(p + 8, &rec, err, sizeof err) == 0) {
      /* a record that passes goes through the classifier, as the hub would use it */
      ah_health_rank_t ranks[2] = {{&rec, "h"}, {NULL, NULL}};
      ah_finding_t f;
      (void)ah_health_classify(ah_coord_get_u64(p), ranks, 2, 1.0, &f);
    } else if (h.type == AH_MSG_FINDING) {
      ah_finding_t f;
      (void)ah_finding_unpack(p + 8, &f, err, sizeof err);
    } else if (h.type == AH_MSG_SAMPLES) {
      ah_health_sample_t x[AH_HEALTH_SAMPLES];
      uint32_t rank;
      int n = ah_health_samples_unpack(p + 8, &rank, x, err, sizeof err);
      for (int i = 0; strag && i < n; i++) ah_strag_add(strag, rank % 3, &x[i], off);
      ah_strag_event_t ev;
      char text[AH_HEALTH_TEXT];
      while (strag && ah_strag_next(strag, &ev)) ah_strag_text(1, &ev, "h", text);
    } else if (h.type == AH_MSG_AUDIT) {
      ah_audit_t a;
      if (ah_audit_unpack(p + 8, &a, err, sizeof err) == 0) {
        if (a.calls == 0 || a.nkeys > AH_AUDIT_KEYS) abort(); /* what the shim would act on */
        for (int i = 0; i < a.nkeys; i++)
          if (a.keys[i].coll >= AH_NUM_COLLS) abort();
      }
    } else if (h.type == AH_MSG_SEARCH_TIME || h.type == AH_MSG_MIN_TIME) {
      ah_coord_time_t t;
      if (ah_coord_time_unpack(h.type, p, &t, err, sizeof err) == 0 &&
          (t.coll >= AH_NUM_FUNCTIONS || !(t.us >= 0)))
        abort(); /* a report the decoder passed must be usable as is */
    } else if (h.type == AH_MSG_DIR_PUT || h.type == AH_MSG_DIR_VAL) {
      uint32_t at = h.type == AH_MSG_DIR_PUT ? AH_COORD_DIR_KEY : 8 + AH_COORD_DIR_KEY;
      int vlen = ah_coord_dir_vlen(p, h.len, at, err, sizeof err);
      if (vlen >= 0 && (uint32_t)vlen + at + 2 != h.len) abort(); /* the value ends the frame */
    } else if (h.type == AH_MSG_RELAY_DATA) {
      /* the channel's frame, as the hub and a relay check it before reading its payload */
      ah_coord_hdr_t ih;
      if (ah_coord_hdr_decode(p + AH_COORD_RELAY_FIXED, &ih, err, sizeof err) == 0 &&
          ih.type != AH_MSG_RELAY_DATA && ih.len > AH_COORD_MAX_INNER)
        abort(); /* a channel's frame fits a relay's buffer */
    } else if (h.type == AH_MSG_LINK_QP) {
      ah_link_qp_t q[AH_LINK_QPS];
      uint32_t pid;
      int n = ah_link_qps_unpack(p, &pid, q, err, sizeof err);
      for (int i = 0; i < n; i++) {
        char gid[48];
        if ((q[i].role != AH_LINK_SENDER && q[i].role != AH_LINK_RECEIVER) ||
            !memchr(q[i].dev, 0, AH_LINK_DEV))
          abort(); /* an identity the decoder passed is usable as is */
        ah_link_gid_text(q[i].rgid, gid, sizeof gid);
      }
    } else if (h.type == AH_MSG_NIC_PORT) {
      ah_nic_port_t x;
      if (ah_nic_port_unpack(p, &x, err, sizeof err) == 0 &&
          (!memchr(x.dev, 0, AH_LINK_DEV) || !x.port || x.up > 1 || x.ngpus > AH_NIC_GPUS))
        abort(); /* a report the decoder passed is usable as is */
    } else if (h.type == AH_MSG_LINK_RATES) {
      ah_link_rate_t r[AH_LINK_RATES];
      uint32_t pid;
      int n = ah_link_rates_unpack(p, &pid, r, err, sizeof err);
      for (int i = 0; lm && i < n; i++) { /* each rate as a connection of the matrix */
        ah_lm_conn_t c = {.src = r[i].lqpn % 4,
                          .dst = (r[i].lqpn / 4) % 4,
                          .id = r[i].lqpn,
                          .bytes = (double)r[i].bytes,
                          .busy_s = r[i].busy_us / 1e6,
                          .wrs = r[i].wrs,
                          .nhops = 1,
                          .hops = {pid}};
        ah_lm_add(lm, &c);
      }
      if (lm && n >= 0) {
        ah_lm_close(lm, lm_t += 1, 1);
        ah_lm_event_t ev;
        char text[AH_HEALTH_TEXT];
        while (ah_lm_next(lm, &ev)) ah_lm_text(1, &ev, "h", "g", "w", text, sizeof text);
      }
    } else if (h.len >= 8) (void)ah_coord_get_u64(p);
    off += h.len;
  }
  ah_strag_free(strag);
  ah_lm_free(lm);
  return 0;
}
