/* The NIC-down diagnosis (coordinator/ah_coord_nic.c, ah_coord_hub_nic.c): NIC_PORT's wire form and
 * its refusals, and the hub live on 127.0.0.1. There, 6 ranks in 4 processes (two processes drive
 * two GPUs each) send progress records. A process that reports a port down names only the rank on
 * the GPU of its queue pairs there, and every process gets the finding. A process's only rank is
 * named when the queue pairs' GPU is unknown. A report whose GPUs hold no rank of the communicator
 * names nobody. Ports down side by side (two NICs, the two ports of a NIC that failed whole) are
 * each named and all shown by autoha status; a port reported again while down is not named again;
 * a port back clears its own finding from autoha status, and its next fall is named anew. A
 * malformed report is refused by name and its connection dropped. */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_coord_internal.h"
#include "ah_coord_nic.h"
#include "ah_coord_status.h"
#include "coord_test_util.h"

static ah_nic_port_t port_make(uint32_t pid, const char *dev, int port, int up) {
  ah_nic_port_t x;
  memset(&x, 0, sizeof x);
  x.pid = pid, x.port = (uint8_t)port, x.up = (uint8_t)up;
  snprintf(x.dev, sizeof x.dev, "%s", dev);
  return x;
}

START_TEST(nic_port_round_trips) {
  ck_assert_uint_eq(ah_coord_msg_len(AH_MSG_NIC_PORT), AH_NIC_PORT_BYTES);
  ah_nic_port_t x = port_make(4242, "mlx5_3", 1, 0), y;
  x.ngpus = 2, x.gpus[0] = 1, x.gpus[1] = 0xffff, x.nqps = 6;
  uint8_t p[AH_NIC_PORT_BYTES];
  char err[160];
  ah_nic_port_pack(&x, p);
  ck_assert_int_eq(ah_nic_port_unpack(p, &y, err, sizeof err), 0);
  ck_assert_uint_eq(y.pid, 4242);
  ck_assert_str_eq(y.dev, "mlx5_3");
  ck_assert_uint_eq(y.port, 1);
  ck_assert_uint_eq(y.up, 0);
  ck_assert_uint_eq(y.ngpus, 2);
  ck_assert_uint_eq(y.gpus[0], 1);
  ck_assert_uint_eq(y.gpus[1], 0xffff);
  ck_assert_uint_eq(y.gpus[2], 0);
  ck_assert_uint_eq(y.nqps, 6);
}
END_TEST

/* Packs x, lets edit change the bytes, and expects a refusal whose reason holds `want`. */
static void refused(const ah_nic_port_t *x, int at, uint8_t byte, const char *want) {
  uint8_t p[AH_NIC_PORT_BYTES];
  char err[160] = "";
  ah_nic_port_t y;
  ah_nic_port_pack(x, p);
  if (at >= 0) p[at] = byte;
  ck_assert_int_eq(ah_nic_port_unpack(p, &y, err, sizeof err), -1);
  ck_assert_msg(strstr(err, want), "'%s' does not say '%s'", err, want);
}

START_TEST(nic_port_refuses_by_name) {
  ah_nic_port_t x = port_make(7, "mlx5_0", 1, 0);
  x.ngpus = 1;
  const int dev = 4, port = 4 + AH_LINK_DEV, up = port + 1, ngpus = up + 1, gpus = ngpus + 1;
  refused(&x, port, 0, "mlx5_0 port 0 state 0 (expected port 1.., state 0 down or 1 up)");
  refused(&x, up, 2, "mlx5_0 port 1 state 2");
  refused(&x, ngpus, AH_NIC_GPUS + 1, "9 GPUs (at most 8)");
  refused(&x, gpus + 2 * 3 + 1, 5, "unused GPU slot 3 is not zero");
  refused(&x, dev + 2, 0x07, "NIC_PORT of pid 7: its device name is not printable text");
  refused(&x, dev, 0, "its device name is not printable text"); /* empty */
  ah_nic_port_t y = port_make(7, "mlx5_0", 1, 0);
  memset(y.dev, 'a', sizeof y.dev); /* no NUL: packed cut at 15 bytes, so accepted */
  uint8_t p[AH_NIC_PORT_BYTES];
  char err[160];
  ah_nic_port_pack(&y, p);
  ck_assert_int_eq(ah_nic_port_unpack(p, &x, err, sizeof err), 0);
  ck_assert_uint_eq(strlen(x.dev), AH_LINK_DEV - 1);
}
END_TEST

#define RANKS 6
#define PROCS 4
static const int proc_of[RANKS] = {0, 0, 1, 2, 2, 3}; /* processes 0 and 2 hold two ranks */
static uint16_t gpu_of(int r) { return (uint16_t)(r == 1 || r == 4 ? 1 : 0); }

/* Every rank's record, its calls one step further each time: the communicator advances (the test
 * hub's hang bound is short). */
static void progress_all(ah_coord_t **cs, uint64_t comm) {
  static uint64_t step;
  step++;
  for (int r = 0; r < RANKS; r++) {
    ah_health_rec_t rec = {.rank = (uint32_t)r,
                           .pid = 9000u + (uint32_t)proc_of[r],
                           .gpu = gpu_of(r),
                           .state = AH_HEALTH_BUSY,
                           .nkeys = 1};
    rec.keys[0] = (ah_health_key_t){0, 20, step};
    ck_assert_int_eq(ah_coord_progress(cs[proc_of[r]], comm, &rec), 0);
  }
}

/* Sleeps ms, the ranks advancing. */
static void run_ms(ah_coord_t **cs, uint64_t comm, int ms) {
  for (int t = 0; t < ms; t += 100) {
    progress_all(cs, comm);
    sleep_ms(ms - t < 100 ? ms - t : 100);
  }
}

/* Waits until every process has handled `n` findings, the ranks advancing; returns whether they
 * did. */
static int findings_reach(ah_coord_t **cs, uint64_t comm, int n) {
  for (int t = 0; t < 20; t++) {
    run_ms(cs, comm, 100);
    int all = 1;
    for (int p = 0; p < PROCS; p++) all &= ah_coord_client_findings(cs[p]) >= n;
    if (all) return 1;
  }
  return 0;
}

/* The count of lines of the log that hold needle. */
static int log_count(const char *needle) {
  int n = 0;
  for (const char *s = log_text(); (s = strstr(s, needle)); s += strlen(needle)) n++;
  return n;
}

/* The communicator autoha status shows (this test's one). */
static void on_comm(void *arg, const ah_status_comm_t *c) { *(ah_status_comm_t *)arg = *c; }

static ah_status_comm_t status_of(const ah_coord_stamp_t *st) {
  ah_status_comm_t sc;
  memset(&sc, 0, sizeof sc);
  char err[256];
  ck_assert_int_eq(ah_coord_status_query(st, 2000, on_comm, NULL, &sc, err, sizeof err), 0);
  return sc;
}

/* Sends x from process p's client. */
static void report(ah_coord_t **cs, int p, const ah_nic_port_t *x) {
  ck_assert_int_eq(ah_coord_nic_port(cs[p], x), 0);
}

/* Waits for autoha status to show `want` (NULL: no finding), the ranks advancing; returns whether
 * it did (the last text seen in seen). */
static int status_shows(ah_coord_t **cs, const ah_coord_stamp_t *st, uint64_t comm,
                        const char *want, ah_status_comm_t *seen) {
  for (int t = 0; t < 20; t++) {
    *seen = status_of(st);
    if (want ? seen->finding == AH_FINDING_NIC_DOWN && strcmp(seen->text, want) == 0
             : seen->finding == 0 && seen->text[0] == 0)
      return 1;
    run_ms(cs, comm, 100);
  }
  return 0;
}

/* That no process handles a finding beyond n in 600 ms. */
static void no_finding_past(ah_coord_t **cs, uint64_t comm, int n) {
  run_ms(cs, comm, 600);
  for (int p = 0; p < PROCS; p++) ck_assert_int_eq(ah_coord_client_findings(cs[p]), n);
}

#define COMM_TEXT "NIC down on comm 000000000000051c: "
#define TAIL                                                                                       \
  " is down (its own PORT_ERR or DEVICE_FATAL): its connections fail at both ends; the peers' "    \
  "errors follow from it"

START_TEST(a_port_down_names_the_ranks_on_it) {
  log_start();
  ah_coord_stamp_t st;
  ah_coord_hub_t *hub = hub_start_test(&st);
  ck_assert_ptr_nonnull(hub);
  ah_coord_t *cs[PROCS];
  const uint64_t comm = 0x51c;
  ck_assert_int_eq(clients_join_complete(&st, cs, PROCS, proc_of, RANKS, comm), 0);
  run_ms(cs, comm, 300);

  /* process 2 (ranks 3 on GPU 0 and 4 on GPU 1): its queue pairs on mlx5_1 port 1 are GPU 1's */
  ah_nic_port_t x = port_make(9002, "mlx5_1", 1, 0);
  x.ngpus = 1, x.gpus[0] = 1, x.nqps = 4;
  report(cs, 2, &x);
  ck_assert_msg(findings_reach(cs, comm, 1), "the finding did not reach every process: %s",
                log_text());
  const char *want = COMM_TEXT "rank 4 (127.0.0.1 pid 9002 gpu 1)'s NIC mlx5_1 port 1" TAIL;
  ck_assert_msg(log_wait(want, 2000), "%s", log_text());
  for (int t = 0; t < 10 && log_count(want) < PROCS; t++) run_ms(cs, comm, 100);
  ck_assert_int_eq(log_count(want), PROCS);
  ck_assert_msg(!strstr(log_text(), "rank 3 ("), "a healthy rank was named: %s", log_text());

  /* autoha status shows it while the port is down */
  ah_status_comm_t sc = status_of(&st);
  ck_assert_uint_eq(sc.comm, comm);
  ck_assert_uint_eq(sc.finding, AH_FINDING_NIC_DOWN);
  ck_assert_str_eq(sc.text, want);

  /* the same port's PORT_ERR again (the port flapped under NCCL's reader, or a re-tell): named once */
  report(cs, 2, &x);
  report(cs, 2, &x);
  no_finding_past(cs, comm, 1);
  ck_assert_int_eq(log_count(want), PROCS);

  /* another NIC, on another process: process 1's only rank (2), its queue pairs' GPU unknown. Both
   * stand: the new one is named, the first is not overwritten */
  x = port_make(9001, "mlx5_0", 2, 0);
  x.ngpus = 1, x.gpus[0] = 0xffff, x.nqps = 2;
  report(cs, 1, &x);
  ck_assert_msg(findings_reach(cs, comm, 2), "%s", log_text());
  const char *want2 = COMM_TEXT "rank 2 (127.0.0.1 pid 9001 gpu 0)'s NIC mlx5_0 port 2" TAIL;
  ck_assert_msg(log_wait(want2, 2000), "%s", log_text());
  const char *both = COMM_TEXT
      "2 ports down: rank 4 (127.0.0.1 pid 9002 gpu 1)'s NIC mlx5_1 port 1; "
      "rank 2 (127.0.0.1 pid 9001 gpu 0)'s NIC mlx5_0 port 2";
  ck_assert_msg(status_shows(cs, &st, comm, both, &sc), "status shows: %s", sc.text);

  /* process 3 (rank 5 on GPU 0) with queue pairs of GPU 5 only: another communicator's, none here */
  x = port_make(9003, "mlx5_2", 1, 0);
  x.ngpus = 1, x.gpus[0] = 5, x.nqps = 1;
  report(cs, 3, &x);
  no_finding_past(cs, comm, 2);
  ck_assert_msg(!strstr(log_text(), "rank 5 ("), "%s", log_text());

  /* a NIC failed whole (DEVICE_FATAL): process 0 tells each of its two ports down, both of its ranks
   * on port 1, rank 0 on port 2; each port is named once, and all four stand */
  x = port_make(9000, "mlx5_4", 1, 0);
  x.ngpus = 2, x.gpus[0] = 0, x.gpus[1] = 1, x.nqps = 8;
  report(cs, 0, &x);
  ah_nic_port_t x2 = port_make(9000, "mlx5_4", 2, 0);
  x2.ngpus = 1, x2.gpus[0] = 0, x2.nqps = 2;
  report(cs, 0, &x2);
  report(cs, 0, &x); /* its PORT_ERR read again after the fatal event: not new */
  ck_assert_msg(findings_reach(cs, comm, 4), "%s", log_text());
  no_finding_past(cs, comm, 4);
  const char *want3 = COMM_TEXT "ranks 0, 1 (127.0.0.1 pid 9000)'s NIC mlx5_4 port 1" TAIL;
  const char *want4 = COMM_TEXT "rank 0 (127.0.0.1 pid 9000 gpu 0)'s NIC mlx5_4 port 2" TAIL;
  ck_assert_msg(log_wait(want3, 2000) && log_wait(want4, 2000), "%s", log_text());
  for (int t = 0; t < 10 && (log_count(want3) < PROCS || log_count(want4) < PROCS); t++)
    run_ms(cs, comm, 100);
  ck_assert_int_eq(log_count(want3), PROCS);
  ck_assert_int_eq(log_count(want4), PROCS);
  /* four stand: as many as fit whole are listed, then how many more */
  sc = status_of(&st);
  ck_assert_uint_eq(sc.finding, AH_FINDING_NIC_DOWN);
  ck_assert_msg(strncmp(sc.text,
                        COMM_TEXT "4 ports down: rank 4 (127.0.0.1 pid 9002 gpu 1)'s NIC "
                                  "mlx5_1 port 1; rank 2",
                        strlen(COMM_TEXT) + 60) == 0 &&
                    strstr(sc.text, " more"),
                "%s", sc.text);

  /* ports back: each clears its own; the others still stand */
  report(cs, 0, &(ah_nic_port_t){.pid = 9000, .dev = "mlx5_4", .port = 1, .up = 1});
  report(cs, 0, &(ah_nic_port_t){.pid = 9000, .dev = "mlx5_4", .port = 2, .up = 1});
  ck_assert_msg(status_shows(cs, &st, comm, both, &sc), "status shows: %s", sc.text);
  report(cs, 2, &(ah_nic_port_t){.pid = 9002, .dev = "mlx5_1", .port = 1, .up = 1});
  ck_assert_msg(status_shows(cs, &st, comm, want2, &sc), "status shows: %s", sc.text);
  report(cs, 1, &(ah_nic_port_t){.pid = 9001, .dev = "mlx5_0", .port = 2, .up = 1});
  ck_assert_msg(status_shows(cs, &st, comm, NULL, &sc), "status still shows: %s", sc.text);

  /* a port down again after its return is a new fall: it stands again (the hub sends it anew; a
   * process that handled the same finding among its last 8 takes it as a repeat) */
  report(cs, 0, &x2);
  ck_assert_msg(status_shows(cs, &st, comm, want4, &sc), "status shows: %s", sc.text);

  /* a malformed report: refused by name, its connection dropped, the others served */
  x = port_make(9003, "mlx5_2", 1, 0);
  uint8_t p[AH_NIC_PORT_BYTES];
  ah_nic_port_pack(&x, p);
  p[4 + AH_LINK_DEV] = 0; /* port 0 */
  int fd = raw_authed_connect(&st, 0x5eed);
  ck_assert_int_ge(fd, 0);
  uint8_t frame[AH_COORD_HDR_BYTES + AH_NIC_PORT_BYTES];
  ah_coord_hdr_encode(AH_MSG_NIC_PORT, AH_NIC_PORT_BYTES, frame);
  memcpy(frame + AH_COORD_HDR_BYTES, p, sizeof p);
  ck_assert_int_eq(write(fd, frame, sizeof frame), (ssize_t)sizeof frame);
  ck_assert_msg(log_wait("refused a NIC_PORT from 127.0.0.1", 2000), "%s", log_text());
  ck_assert_msg(strstr(log_text(),
                       "mlx5_2 port 0 state 0 (expected port 1.., state 0 down or 1 "
                       "up); connection dropped"),
                "%s", log_text());
  close(fd);
  ck_assert(legit_roundtrip(&st, 0x77));
  for (int i = 0; i < PROCS; i++) ah_coord_client_close(cs[i]);
  ah_coord_hub_close(hub);
  log_stop();
}
END_TEST

int main(void) {
  const TTest *const tests[] = {nic_port_round_trips, nic_port_refuses_by_name,
                                a_port_down_names_the_ranks_on_it};
  Suite *s = suite_create("coord_nic");
  TCase *tc = tcase_create("nic");
  tcase_set_timeout(tc, 60);
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
  return ah_check_run(s);
}
