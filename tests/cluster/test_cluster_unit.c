/* cluster/'s pure parts and its failure without etcd: AUTOHA_ETCD's grammar (every refusal names
 * the endpoint and why), the variable through the settings table, base64 both ways and its
 * refusals, job keys, and a client whose only member is a closed port (an error naming it, well
 * within the timeout). Needs libcurl.so.4 and jansson, not etcd. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_cluster_b64.h"
#include "ah_cluster_endpoints.h"
#include "ah_cluster_etcd.h"
#include "ah_cluster_job.h"
#include "ah_env.h"

START_TEST(endpoint_lists_parse) {
  ah_cluster_endpoints_t e;
  char err[256];
  ck_assert_int_eq(
      ah_cluster_endpoints_parse("http://127.0.0.1:2379,http://etcd-2.site:22379/,http://[::1]:3",
                                 &e, err, sizeof err),
      0);
  ck_assert_int_eq(e.n, 3);
  ck_assert_str_eq(e.url[0], "http://127.0.0.1:2379");
  ck_assert_str_eq(e.url[1], "http://etcd-2.site:22379"); /* the trailing '/' dropped */
  ck_assert_str_eq(e.url[2], "http://[::1]:3");
  char buf[512];
  ck_assert_str_eq(ah_cluster_endpoints_format(&e, buf, sizeof buf),
                   "http://127.0.0.1:2379,http://etcd-2.site:22379,http://[::1]:3");
  ck_assert_int_eq(ah_cluster_endpoints_parse("", &e, err, sizeof err), 0);
  ck_assert_int_eq(e.n, 0);
}
END_TEST

START_TEST(bad_endpoints_are_refused_by_name) {
  static const struct {
    const char *text, *said;
  } bad[] = {
      {"127.0.0.1:2379", "'127.0.0.1:2379': does not start with http://"},
      {"https://a:1", "https is not supported"},
      {"http://a", "'http://a': no :PORT"},
      {"http://a:0", "not a number in 1..65535"},
      {"http://a:65536", "not a number in 1..65535"},
      {"http://a:12/v3", "'http://a:12/v3'"},
      {"http://a b:1", "' ' in the host name"},
      {"http://a:1,,http://b:2", "empty"},
      {"http://a:1,", "empty"},
      {"http://:1", "no host"},
      {"http://[::1:2", "[ADDR]:PORT"},
      {"http://a:1,http://a:2,http://a:3,http://a:4,http://a:5,http://a:6,http://a:7,http://a:8,"
       "http://a:9",
       "more than 8"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ah_cluster_endpoints_t e = {.n = 42};
    char err[256] = "";
    ck_assert_int_eq(ah_cluster_endpoints_parse(bad[i].text, &e, err, sizeof err), -1);
    ck_assert_int_eq(e.n, 42); /* unchanged */
    ck_assert_msg(strstr(err, bad[i].said), "'%s' gave '%s'", bad[i].text, err);
  }
}
END_TEST

START_TEST(the_settings_rows_take_and_refuse_values) {
  ah_settings_t s;
  ah_env_defaults(&s);
  ck_assert_int_eq(s.etcd.n, 0);
  ck_assert_str_eq(s.etcd_prefix, "/autoha/");
  ck_assert_int_eq(s.etcd_ttl_s, 10);
  const ah_env_var_t *v = ah_env_var_find("AUTOHA_ETCD");
  ck_assert_ptr_nonnull(v);
  char err[512], buf[256];
  ck_assert_int_eq(
      ah_env_parse_one(v, "http://127.0.0.1:2379,http://127.0.0.1:22379", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.etcd.n, 2);
  ck_assert_str_eq(ah_env_value_format(v, &s, buf, sizeof buf),
                   "http://127.0.0.1:2379,http://127.0.0.1:22379");
  ck_assert_int_eq(ah_env_parse_one(v, "http://127.0.0.1:2379,localhost:2", &s, err, sizeof err),
                   -1);
  ck_assert_msg(strstr(err, "invalid value for AUTOHA_ETCD") && strstr(err, "'localhost:2'"), "%s",
                err);
  ck_assert_int_eq(s.etcd.n, 2); /* the earlier value kept */
  const ah_env_var_t *p = ah_env_var_find("AUTOHA_ETCD_PREFIX");
  ck_assert_int_eq(ah_env_parse_one(p, "/site-a/", &s, err, sizeof err), 0);
  ck_assert_str_eq(s.etcd_prefix, "/site-a/");
  ck_assert_int_eq(ah_env_parse_one(p, "site", &s, err, sizeof err), -1);
  ck_assert_int_eq(ah_env_parse_one(p, "/a b/", &s, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "'/a b/'"), "%s", err);
  ck_assert_int_eq(ah_env_parse_one(ah_env_var_find("AUTOHA_ETCD_TTL_S"), "1", &s, err, sizeof err),
                   -1);
}
END_TEST

START_TEST(base64_round_trips_and_refuses_what_is_not_base64) {
  static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
  static const char *const coded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                      "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"}; /* RFC 4648's vectors */
  for (int i = 0; i < 7; i++) {
    char out[16];
    unsigned char back[16];
    ah_cluster_b64_encode(plain[i], strlen(plain[i]), out);
    ck_assert_str_eq(out, coded[i]);
    ck_assert_uint_eq(ah_cluster_b64_len(strlen(plain[i])), strlen(coded[i]));
    ck_assert_int_eq(ah_cluster_b64_decode(coded[i], back), (long)strlen(plain[i]));
    ck_assert_str_eq((char *)back, plain[i]);
  }
  unsigned char all[256], back[300];
  char text[400];
  for (int i = 0; i < 256; i++) all[i] = (unsigned char)i;
  ah_cluster_b64_encode(all, 256, text);
  ck_assert_int_eq(ah_cluster_b64_decode(text, back), 256);
  ck_assert(memcmp(all, back, 256) == 0);
  static const char *const bad[] = {"Zg=", "Zg==Zg==", "Z===", "Zm9*", "Zm9v\n", "=Zm9"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(ah_cluster_b64_decode(bad[i], back) == -1, "'%s' decoded", bad[i]);
}
END_TEST

START_TEST(job_keys_are_checked) {
  char key[64], err[256];
  ck_assert_int_eq(ah_cluster_job_key("/autoha/", "slurm-1234", key, sizeof key, err, sizeof err),
                   0);
  ck_assert_str_eq(key, "/autoha/jobs/slurm-1234");
  static const char *const bad[] = {"", "a/b", "a b", "caf\xc3\xa9"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(ah_cluster_job_key("/autoha/", bad[i], key, sizeof key, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is not usable"), "%s", err);
  }
  char longid[200];
  memset(longid, 'x', sizeof longid - 1);
  longid[sizeof longid - 1] = 0;
  ck_assert_int_eq(ah_cluster_job_key("/autoha/", longid, key, sizeof key, err, sizeof err), -1);
}
END_TEST

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

START_TEST(a_client_without_etcd_fails_fast_naming_the_member) {
  /* a port nobody listens on: bound, then closed */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  ah_cluster_endpoints_t e = {.n = 1};
  snprintf(e.url[0], sizeof e.url[0], "http://127.0.0.1:%d", ntohs(a.sin_port));
  char err[AH_CLUSTER_ERR_LEN];
  ah_cluster_etcd_t *c;
  ck_assert_msg(ah_cluster_etcd_open(&e, 0.5, &c, err, sizeof err) == 0, "%s", err);
  double t0 = now_s();
  int64_t id;
  ck_assert_int_eq(ah_cluster_etcd_lease_grant(c, 5, &id, err, sizeof err), -1);
  double took = now_s() - t0;
  ck_assert_msg(took < 0.8, "took %.2f s with a 0.5 s timeout", took);
  ck_assert_msg(strstr(err, e.url[0]) && strstr(err, "no member answered within 0.5 s"), "%s", err);
  ck_assert_int_eq(ah_cluster_etcd_member_healthy(c, 0, err, sizeof err), 0);
  ck_assert_int_eq(ah_cluster_etcd_member_healthy(c, 1, err, sizeof err), -1);
  ah_cluster_etcd_close(c);
  ah_cluster_endpoints_t none = {0};
  ck_assert_int_eq(ah_cluster_etcd_open(&none, 1, &c, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "AUTOHA_ETCD is empty"), "%s", err);
  ck_assert_int_eq(ah_cluster_etcd_open(&e, 0, &c, err, sizeof err), -1);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {endpoint_lists_parse,
                                bad_endpoints_are_refused_by_name,
                                the_settings_rows_take_and_refuse_values,
                                base64_round_trips_and_refuses_what_is_not_base64,
                                job_keys_are_checked,
                                a_client_without_etcd_fails_fast_naming_the_member};
  return ah_check_main("cluster_unit", (ah_check_case_t){.name = "unit", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
