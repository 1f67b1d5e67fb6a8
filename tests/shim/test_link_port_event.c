/* The client side of the NIC-down diagnosis (rdma/rdma_link_qp.c's ah_shim_link_port_event), in
 * process with stand-in verbs contexts and queue pairs and no hub: what it decides to tell, read
 * from its log lines. A port with queue pairs on it is told down once a fall — a PORT_ERR read
 * again is not told — and its PORT_ACTIVE once; a port without is not told; a DEVICE_FATAL tells
 * each port of the NIC with queue pairs that was not told already; and 18 NICs with two ports
 * each, all down at once (36 ports, more than the 16 the old fixed table held), each have their
 * return told. */
#include <check.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ah_check.h"
#include "rdma_link.h"

static char log_buf[1 << 20];
static FILE *log_file;
static int saved_stderr = -1;

static void log_begin(void) {
  fflush(stderr);
  log_file = tmpfile();
  saved_stderr = dup(2);
  dup2(fileno(log_file), 2);
}

static const char *log_now(void) {
  fflush(stderr);
  fflush(log_file);
  rewind(log_file);
  size_t n = fread(log_buf, 1, sizeof log_buf - 1, log_file);
  log_buf[n] = 0;
  fseek(log_file, 0, SEEK_END);
  return log_buf;
}

static void log_end(void) {
  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  fclose(log_file);
}

/* The count of lines of the log that hold needle. */
static int log_count(const char *needle) {
  int n = 0;
  for (const char *s = log_now(); (s = strstr(s, needle)); s += strlen(needle)) n++;
  return n;
}

/* Stand-ins the link timing wraps: never called here (nothing is posted or polled). */
static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  (void)qp, (void)wr, (void)bad;
  return 0;
}
static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  (void)cq, (void)n, (void)wc;
  return 0;
}

#define NICS 20
static struct ibv_device devs[NICS];
static struct ibv_context ctxs[NICS];
static struct ibv_qp qps[NICS][2];

/* NIC i ("mlx5_<i>"), with one queue pair of this process on each port, 1 and 2 (NIC 0: port 1
 * only, its port 2 carries none). */
static void nic_make(int i) {
  snprintf(devs[i].name, sizeof devs[i].name, "mlx5_%d", i);
  ctxs[i].device = &devs[i];
  ctxs[i].ops.post_send = fake_post_send;
  ctxs[i].ops.poll_cq = fake_poll_cq;
  ah_shim_ha_verbs_t real;
  memset(&real, 0, sizeof real);
  for (int p = 0; p < (i == 0 ? 1 : 2); p++) {
    struct ibv_qp *qp = &qps[i][p];
    qp->context = &ctxs[i];
    qp->qp_type = IBV_QPT_RC;
    qp->qp_num = (uint32_t)(0x100 + 2 * i + p);
    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof init);
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 16;
    ah_shim_link_created(qp, &init, 0, &real);
    struct ibv_qp_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = (uint8_t)(p + 1);
    ah_shim_link_modified(qp, &attr, IBV_QP_STATE | IBV_QP_PORT);
  }
}

static void event(int i, enum ibv_event_type type, int port) {
  struct ibv_async_event ev;
  memset(&ev, 0, sizeof ev);
  ev.event_type = type;
  if (type == IBV_EVENT_DEVICE_FATAL) ev.element.port_num = 0;
  else ev.element.port_num = port;
  ah_shim_link_port_event(&ctxs[i], &ev);
}

START_TEST(a_port_is_told_once_a_fall) {
  ck_assert(ah_shim_link_on());
  log_begin();
  nic_make(0);
  nic_make(1);
  const char *down01 = "NIC mlx5_0 port 1 is down (PORT_ERR): 1 of this process's queue pairs";
  event(0, IBV_EVENT_PORT_ERR, 1);
  ck_assert_msg(log_count(down01) == 1, "%s", log_now());
  /* read again, twice: not told again */
  event(0, IBV_EVENT_PORT_ERR, 1);
  event(0, IBV_EVENT_PORT_ERR, 1);
  ck_assert_msg(log_count(down01) == 1, "%s", log_now());
  ck_assert_int_eq(log_count("NIC mlx5_0 port 1: PORT_ERR again; the hub was told already"), 2);
  /* a port without queue pairs of this process: nothing to tell */
  event(0, IBV_EVENT_PORT_ERR, 2);
  ck_assert_msg(!strstr(log_now(), "mlx5_0 port 2"), "%s", log_now());
  /* back once: told once; a second PORT_ACTIVE and one of a port never told down are not */
  const char *up01 = "NIC mlx5_0 port 1 is active again (PORT_ACTIVE)";
  event(0, IBV_EVENT_PORT_ACTIVE, 1);
  event(0, IBV_EVENT_PORT_ACTIVE, 1);
  event(0, IBV_EVENT_PORT_ACTIVE, 2);
  ck_assert_msg(log_count(up01) == 1, "%s", log_now());
  ck_assert_msg(!strstr(log_now(), "mlx5_0 port 2 is active"), "%s", log_now());
  /* down after its return: a new fall, told */
  event(0, IBV_EVENT_PORT_ERR, 1);
  ck_assert_msg(log_count(down01) == 2, "%s", log_now());

  /* NIC 1 fails whole after its port 1's PORT_ERR: port 2 is told, port 1 not again */
  const char *down11 = "NIC mlx5_1 port 1 is down (PORT_ERR)";
  event(1, IBV_EVENT_PORT_ERR, 1);
  ck_assert_msg(log_count(down11) == 1, "%s", log_now());
  event(1, IBV_EVENT_DEVICE_FATAL, 0);
  ck_assert_msg(log_count("NIC mlx5_1 failed whole (DEVICE_FATAL): its port 2 is down with 1 of "
                          "this process's queue pairs on it") == 1,
                "%s", log_now());
  ck_assert_msg(!strstr(log_now(), "its port 1 is down"), "%s", log_now());
  /* read again: nothing new */
  event(1, IBV_EVENT_DEVICE_FATAL, 0);
  event(1, IBV_EVENT_PORT_ERR, 2);
  ck_assert_int_eq(log_count("NIC mlx5_1 failed whole"), 1);
  ck_assert_int_eq(log_count("NIC mlx5_1 port 2 is down"), 0);
  log_end();
}
END_TEST

START_TEST(many_ports_down_each_come_back) {
  ck_assert(ah_shim_link_on());
  log_begin();
  for (int i = 2; i < NICS; i++) nic_make(i);
  for (int i = 2; i < NICS; i++)
    for (int p = 1; p <= 2; p++) event(i, IBV_EVENT_PORT_ERR, p);
  ck_assert_int_eq(log_count("is down (PORT_ERR)"), 2 * (NICS - 2));
  for (int i = 2; i < NICS; i++)
    for (int p = 1; p <= 2; p++) event(i, IBV_EVENT_PORT_ACTIVE, p);
  ck_assert_msg(log_count("is active again (PORT_ACTIVE)") == 2 * (NICS - 2), "%s", log_now());
  char last[64];
  snprintf(last, sizeof last, "NIC mlx5_%d port 2 is active again", NICS - 1);
  ck_assert_msg(strstr(log_now(), last), "%s", log_now());
  log_end();
}
END_TEST

int main(void) {
  const TTest *const tests[] = {a_port_is_told_once_a_fall, many_ports_down_each_come_back};
  return ah_check_main("link_port_event", (ah_check_case_t){.name = "port_event", .timeout = 30},
                       tests, AH_CHECK_COUNT(tests));
}
