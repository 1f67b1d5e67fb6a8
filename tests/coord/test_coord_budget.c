/* The hub's memory for one job is bounded as a whole, not only per connection: 16 authenticated
 * connections that ask for the directory's largest value 20,000 times each and never read (some
 * 11 MB of answers apiece, 180 MB in all, within the per-connection cap) leave the hub's send
 * buffers within its job budget (24 MB here) and its process at most that above where it started, the connection with the most queued
 * dropped each time the budget is reached, with a line saying so; a legitimate pair of clients is
 * served all the while. (The outside run that found it: 16 such connections took the hub from 10
 * to 962 MB.) */
#include <check.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_coord_internal.h"
#include "ah_log.h"
#include "coord_test_util.h"

#define CONNS 16
#define GETS 20000
#define BUDGET (24u << 20)

static int send_all(int fd, const uint8_t *p, size_t n) {
  char err[AH_NET_ERR_LEN];
  return ah_coord_net_write_full(err, fd, p, n, ah_coord_now_ns() + 10000000000ull);
}

START_TEST(slow_readers_together_stay_within_the_job_budget) {
  log_start();
  uint8_t secret[16];
  for (int i = 0; i < 16; i++) secret[i] = (uint8_t)(0xb0 + i);
  ah_coord_hub_opts_t o;
  ah_coord_hub_opts_default(&o);
  o.max_outbuf_job = BUDGET; /* each connection alone stays within max_outbuf (64 MiB) */
  ah_coord_stamp_t st;
  ah_coord_hub_t *hub = ah_coord_hub_open("127.0.0.1:0", secret, &o, &st);
  ck_assert_ptr_nonnull(hub);
  uint8_t key[AH_COORD_DIR_KEY];
  memset(key, 0x42, sizeof key);
  int w = raw_authed_connect(&st, 0x9000); /* the value: 512 bytes */
  ck_assert_int_ge(w, 0);
  uint8_t put[AH_COORD_HDR_BYTES + AH_COORD_DIR_PUT_FIXED + 512];
  memset(put, 0x17, sizeof put);
  ah_coord_hdr_encode(AH_MSG_DIR_PUT, AH_COORD_DIR_PUT_FIXED + 512, put);
  memcpy(put + AH_COORD_HDR_BYTES, key, sizeof key);
  put[AH_COORD_HDR_BYTES + AH_COORD_DIR_KEY] = 512 >> 8;
  put[AH_COORD_HDR_BYTES + AH_COORD_DIR_KEY + 1] = 512 & 0xff;
  ck_assert_int_eq(send_all(w, put, sizeof put), AH_NET_OK);
  ck_assert(raw_ping(w));
  long base = proc_status_kb(getpid(), "VmRSS");
  ck_assert_int_gt(base, 0);
  /* every connection's requests, one buffer sent whole */
  static uint8_t gets[GETS][AH_COORD_HDR_BYTES + AH_COORD_DIR_GET_BYTES];
  for (int i = 0; i < GETS; i++) {
    ah_coord_hdr_encode(AH_MSG_DIR_GET, AH_COORD_DIR_GET_BYTES, gets[i]);
    ah_coord_put_u64(gets[i] + AH_COORD_HDR_BYTES, (uint64_t)i + 1);
    ah_coord_put_u32(gets[i] + AH_COORD_HDR_BYTES + 8, 0);
    memcpy(gets[i] + AH_COORD_HDR_BYTES + 12, key, sizeof key);
  }
  int fd[CONNS];
  long peak = base;
  for (int c = 0; c < CONNS; c++) {
    fd[c] = raw_authed_connect(&st, 0x9100 + (uint64_t)c);
    ck_assert_int_ge(fd[c], 0);
    (void)send_all(fd[c], &gets[0][0], sizeof gets); /* a dropped one may refuse the rest */
    long rss = proc_status_kb(getpid(), "VmRSS");
    if (rss > peak) peak = rss;
  }
  for (int t = 0; t < 20; t++) { /* the hub works through what it read */
    sleep_ms(100);
    long rss = proc_status_kb(getpid(), "VmRSS");
    if (rss > peak) peak = rss;
  }
  /* what the hub accounts, whatever the allocator; and, where freed memory goes back to the system
   * at once (not under ASan, whose quarantine keeps freed blocks), the process's resident size */
  size_t held = ah_coord_hub_buffered_peak(hub);
  ck_assert_msg(held <= BUDGET + (4u << 20), "the hub's send buffers held %zu bytes (budget %u)",
                held, BUDGET);
#if !defined(__SANITIZE_ADDRESS__)
  ck_assert_msg((peak - base) * 1024 < (long)BUDGET + (16l << 20),
                "the hub's process grew by %ld KiB (budget %u KiB)", peak - base, BUDGET >> 10);
#else
  (void)peak;
#endif
  ck_assert(log_wait("the hub's send buffers hold", 2000));
  ck_assert(log_wait("with the most queued", 100));
  ck_assert(legit_roundtrip(&st, 77));
  for (int c = 0; c < CONNS; c++) close(fd[c]);
  close(w);
  ah_coord_hub_close(hub);
  log_stop();
}
END_TEST

int main(void) {
  ah_log_set_level(AH_LOG_WARN);
  const TTest *const tests[] = {slow_readers_together_stay_within_the_job_budget};
  return ah_check_main("coord_budget", (ah_check_case_t){.name = "budget", .timeout = 60}, tests,
                       AH_CHECK_COUNT(tests));
}
