/* Unit tests of tuner/ah_override.c: the AUTOHA_OVERRIDE grammar (valid forms, malformed tokens
 * named with their position while the other rules still apply), most-specific matching by bytes
 * and by bin, the check against the pairs NCCL allows, and sizes. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "ah_check.h"
#include "ah_override.h"

#define MIB (1024ull * 1024ull)

START_TEST(parse_example) {
  ah_override_t ov;
  char err[512];
  int n = ah_override_parse(
      "allreduce@1M-64M:algo=ring,proto=simple,nchannels=16;allgather:nchannels=8", &ov, err,
      sizeof err);
  ck_assert_int_eq(n, 0);
  ck_assert_str_eq(err, "");
  ck_assert_int_eq(ov.nrules, 2);
  ck_assert_int_eq(ov.rules[0].coll, AH_FUNC_ALLREDUCE);
  ck_assert_uint_eq(ov.rules[0].lo, MIB);
  ck_assert_uint_eq(ov.rules[0].hi, 64 * MIB);
  ck_assert_int_eq(ov.rules[0].cfg.algo, AH_ALGO_RING);
  ck_assert_int_eq(ov.rules[0].cfg.proto, AH_PROTO_SIMPLE);
  ck_assert_int_eq(ov.rules[0].cfg.res[AH_DIM_NCHANNELS], 16);
  ck_assert_int_eq(ov.rules[0].cfg.res[AH_DIM_CHUNK], 0);
  ck_assert_int_eq(ov.rules[0].pos, 0);
  ck_assert_int_eq(ov.rules[1].coll, AH_FUNC_ALLGATHER);
  ck_assert_uint_eq(ov.rules[1].lo, 0);
  ck_assert_uint_eq(ov.rules[1].hi, UINT64_MAX);
  ck_assert_int_eq(ov.rules[1].cfg.algo, -1);
  ck_assert_int_eq(ov.rules[1].cfg.proto, -1);
  ck_assert_int_eq(ov.rules[1].cfg.res[AH_DIM_NCHANNELS], 8);
  ck_assert_int_eq(ov.rules[1].pos, 53);
  char buf[256];
  ck_assert_str_eq(ah_override_rule_format(&ov.rules[0], buf, sizeof buf),
                   "allreduce@1M-64M:algo=ring,proto=simple,nchannels=16");
  ck_assert_str_eq(ah_override_rule_format(&ov.rules[1], buf, sizeof buf), "allgather:nchannels=8");
}
END_TEST

START_TEST(parse_forms) {
  ah_override_t ov;
  char err[512];
  ck_assert_int_eq(ah_override_parse(" * @ 4K- : chunk=512K ; ; broadcast@-1m:proto=LL128 ;"
                                     "reduce@64:algo=Tree;bcast:nchannels=2",
                                     &ov, err, sizeof err),
                   0);
  ck_assert_int_eq(ov.nrules, 4);
  ck_assert_int_eq(ov.rules[0].coll, -1);
  ck_assert_uint_eq(ov.rules[0].lo, 4096);
  ck_assert_uint_eq(ov.rules[0].hi, UINT64_MAX);
  ck_assert_int_eq(ov.rules[0].cfg.res[AH_DIM_CHUNK], 512 * 1024);
  ck_assert_int_eq(ov.rules[1].coll, AH_FUNC_BROADCAST);
  ck_assert_uint_eq(ov.rules[1].lo, 0);
  ck_assert_uint_eq(ov.rules[1].hi, MIB);
  ck_assert_int_eq(ov.rules[1].cfg.proto, AH_PROTO_LL128);
  ck_assert_uint_eq(ov.rules[2].lo, 64);
  ck_assert_uint_eq(ov.rules[2].hi, 64);
  ck_assert_int_eq(ov.rules[2].cfg.algo, AH_ALGO_TREE);
  ck_assert_int_eq(ov.rules[3].coll, AH_FUNC_BROADCAST);
  char buf[256];
  ck_assert_str_eq(ah_override_rule_format(&ov.rules[0], buf, sizeof buf), "*@4K-:chunk=512K");
  ck_assert_str_eq(ah_override_rule_format(&ov.rules[1], buf, sizeof buf),
                   "broadcast@-1M:proto=ll128");
  ck_assert_str_eq(ah_override_rule_format(&ov.rules[2], buf, sizeof buf), "reduce@64:algo=tree");
  /* Empty and NULL strings are no rules, no errors. */
  ck_assert_int_eq(ah_override_parse("", &ov, err, sizeof err), 0);
  ck_assert_int_eq(ov.nrules, 0);
  ck_assert_int_eq(ah_override_parse(NULL, &ov, NULL, 0), 0);
  ck_assert_int_eq(ov.nrules, 0);
  ck_assert_int_eq(ah_override_parse(" ; ;", &ov, NULL, 0), 0);
}
END_TEST

/* One malformed input: the number of errors, the text each message must contain, and the rules
 * that must survive. */
static void check_bad(const char *s, int nerr, const char *needle, int nrules) {
  ah_override_t ov;
  char err[1024];
  int n = ah_override_parse(s, &ov, err, sizeof err);
  ck_assert_msg(n == nerr, "'%s': %d errors, expected %d (%s)", s, n, nerr, err);
  ck_assert_msg(strstr(err, needle) != NULL, "'%s': error '%s' lacks '%s'", s, err, needle);
  ck_assert_msg(ov.nrules == nrules, "'%s': %d rules kept, expected %d", s, ov.nrules, nrules);
}

START_TEST(parse_errors_name_token_and_position) {
  check_bad("allreduce@1M-64M:algo=rong,proto=simple;allgather:nchannels=8", 1,
            "'algo=rong' at position 17: unknown algorithm (expected tree|ring|", 1);
  check_bad("allgathr:nchannels=8;allreduce:algo=ring", 1,
            "'allgathr' at position 0: unknown collective", 1);
  check_bad("allreduce:proto=fast", 1,
            "'proto=fast' at position 10: unknown protocol (expected ll|ll128|simple)", 0);
  check_bad("allreduce:nchannels=0", 1, "'nchannels=0' at position 10: bad channel count", 0);
  check_bad("allreduce:nchannels=65", 1, "'nchannels=65' at position 10", 0);
  check_bad("allreduce:nchannels=8K", 1, "'nchannels=8K'", 0);
  check_bad("allreduce:nchannels=-3", 1, "'nchannels=-3'", 0);
  check_bad("allreduce:chunk=0", 1, "'chunk=0' at position 10: bad chunk size", 0);
  check_bad("allreduce:chunk=2G", 1, "'chunk=2G'", 0);
  check_bad("allreduce:threads=4", 1, "'threads' at position 10: unknown field", 0);
  check_bad("allreduce:algo", 1, "'algo' at position 10: field without '='", 0);
  check_bad("allreduce:algo=", 1, "'algo=' at position 10: field without a value", 0);
  check_bad("allreduce:algo=ring,algo=tree", 1, "'algo=tree' at position 20: field given twice", 0);
  check_bad("allreduce:algo=ring,,proto=ll", 1, "at position 19: empty field", 0);
  check_bad("allreduce:", 1, "empty field", 0);
  check_bad("allreduce", 1, "'allreduce' at position 0: rule without ':'", 0);
  check_bad("ring;allreduce:algo=tree", 1, "'ring' at position 0: rule without ':'", 1);
  check_bad(":algo=ring", 1, "at position 0: unknown collective", 0);
  check_bad("allreduce@:algo=ring", 1, "'@' at position 9: empty size range", 0);
  check_bad("allreduce@1X-2M:algo=ring", 1, "'1X' at position 10: bad size", 0);
  check_bad("allreduce@1M-2Q:algo=ring", 1, "'2Q' at position 13: bad size", 0);
  check_bad("allreduce@64M-1M:algo=ring", 1, "'64M-1M' at position 10: range ends before it starts",
            0);
  check_bad("allreduce@-:algo=ring", 1, "'-' at position 10: size range with no bounds", 0);
  check_bad("allreduce@99999999999999999999:algo=ring", 1, "bad size", 0);
  check_bad("allreduce@1M-2M-3M:algo=ring", 1, "'2M-3M' at position 13: bad size", 0);
  /* Several errors: each reported, on its own line, and the good rules between them kept. */
  check_bad("a:algo=ring;allreduce:algo=ring;b:algo=tree;allgather:nchannels=4;x", 3,
            "'a' at position 0: unknown collective", 2);
  check_bad("a:algo=ring;allreduce:algo=ring;b:algo=tree;allgather:nchannels=4;x", 3,
            "\n'b' at position 32: unknown collective", 2);
  check_bad("a:algo=ring;allreduce:algo=ring;b:algo=tree;allgather:nchannels=4;x", 3,
            "\n'x' at position 66: rule without ':'", 2);
}
END_TEST

START_TEST(parse_limits) {
  /* More rules than fit: the extra ones are errors, the first AH_OVERRIDE_MAX_RULES kept. */
  char s[4096] = "";
  for (int i = 0; i < AH_OVERRIDE_MAX_RULES + 3; i++) strcat(s, "allreduce:nchannels=2;");
  ah_override_t ov;
  char err[2048];
  ck_assert_int_eq(ah_override_parse(s, &ov, err, sizeof err), 3);
  ck_assert_int_eq(ov.nrules, AH_OVERRIDE_MAX_RULES);
  ck_assert_ptr_nonnull(strstr(err, "too many rules"));
  /* A tiny error buffer is filled and terminated, and the count is still right. */
  char tiny[16];
  ck_assert_int_eq(ah_override_parse("x;y;z", &ov, tiny, sizeof tiny), 3);
  ck_assert_uint_lt(strlen(tiny), sizeof tiny);
  ck_assert_int_eq(ah_override_parse("x;y;z", &ov, NULL, 0), 3);
}
END_TEST

START_TEST(match_most_specific) {
  ah_override_t ov;
  ck_assert_int_eq(
      ah_override_parse("*:nchannels=8;allreduce:algo=ring;allreduce@1M-64M:proto=simple;"
                        "allreduce@4M-8M:proto=ll128;allreduce@4M-8M:proto=ll",
                        &ov, NULL, 0),
      0);
  ah_config_t c;
  memset(&c, 0, sizeof c);
  /* '*' only for other collectives. */
  ck_assert_int_eq(ah_override_match(&ov, AH_FUNC_ALLGATHER, 100, &c), 0);
  ck_assert_int_eq(c.res[AH_DIM_NCHANNELS], 8);
  /* A named collective beats '*' whatever the order; rules are not merged. */
  ck_assert_int_eq(ah_override_match(&ov, AH_FUNC_ALLREDUCE, 100, &c), 1);
  ck_assert_int_eq(c.algo, AH_ALGO_RING);
  ck_assert_int_eq(c.res[AH_DIM_NCHANNELS], 0);
  /* The narrower range beats the wider one; equal ranges: the earlier rule. */
  ck_assert_int_eq(ah_override_match(&ov, AH_FUNC_ALLREDUCE, 2 * MIB, &c), 2);
  ck_assert_int_eq(ah_override_match(&ov, AH_FUNC_ALLREDUCE, 5 * MIB, &c), 3);
  ck_assert_int_eq(c.proto, AH_PROTO_LL128);
  /* Inclusive ends. */
  ck_assert_int_eq(ah_override_match(&ov, AH_FUNC_ALLREDUCE, 64 * MIB, &c), 2);
  ck_assert_int_eq(ah_override_match(&ov, AH_FUNC_ALLREDUCE, 64 * MIB + 1, &c), 1);
  ck_assert_int_eq(ah_override_match(&ov, AH_FUNC_ALLREDUCE, MIB - 1, &c), 1);
  /* By bin: the rule must hold the whole bin. */
  ck_assert_int_eq(ah_override_match_bin(&ov, AH_FUNC_ALLREDUCE, 22, &c), 3); /* 4M..8M-1 */
  ck_assert_int_eq(ah_override_match_bin(&ov, AH_FUNC_ALLREDUCE, 23, &c), 2); /* 8M..16M-1 */
  ck_assert_int_eq(ah_override_match_bin(&ov, AH_FUNC_ALLREDUCE, 26, &c), 1); /* 64M..128M-1 */
  ck_assert_int_eq(ah_override_match_bin(&ov, AH_FUNC_REDUCE, 0, &c), 0);

  ah_override_t none;
  ah_override_parse("allgather@1K-2K:algo=ring", &none, NULL, 0);
  ah_config_t untouched;
  memset(&untouched, 0x5a, sizeof untouched);
  ah_config_t before = untouched;
  ck_assert_int_eq(ah_override_match(&none, AH_FUNC_ALLREDUCE, 1500, &untouched), -1);
  ck_assert_int_eq(ah_override_match(&none, AH_FUNC_ALLGATHER, 4096, &untouched), -1);
  ck_assert_int_eq(memcmp(&before, &untouched, sizeof before), 0);
  ck_assert_int_eq(ah_override_match(&none, AH_FUNC_ALLGATHER, 2048, &untouched), 0);
}
END_TEST

START_TEST(allowed_pairs) {
  ah_space_t sp;
  memset(&sp, 0, sizeof sp);
  sp.nsub = 2;
  sp.sub[0].algo = AH_ALGO_RING;
  sp.sub[0].proto = AH_PROTO_SIMPLE;
  sp.sub[1].algo = AH_ALGO_TREE;
  sp.sub[1].proto = AH_PROTO_LL;
  ah_config_t c;
  memset(&c, 0, sizeof c);
  c.algo = -1;
  c.proto = -1;
  ck_assert(ah_config_allowed_space(&c, &sp));
  c.algo = AH_ALGO_RING;
  ck_assert(ah_config_allowed_space(&c, &sp));
  c.proto = AH_PROTO_LL;
  ck_assert(!ah_config_allowed_space(&c, &sp)); /* ring/ll is not among the pairs */
  c.algo = -1;
  ck_assert(ah_config_allowed_space(&c, &sp)); /* some algorithm runs ll */
  c.proto = AH_PROTO_LL128;
  ck_assert(!ah_config_allowed_space(&c, &sp));
  c.algo = AH_ALGO_NVLS;
  c.proto = -1;
  ck_assert(!ah_config_allowed_space(&c, &sp));

  float table[AH_NUM_ALGOS * AH_NUM_PROTOS];
  for (int i = 0; i < AH_NUM_ALGOS * AH_NUM_PROTOS; i++) table[i] = AH_COST_IGNORE;
  table[AH_ALGO_RING * AH_NUM_PROTOS + AH_PROTO_SIMPLE] = 12.5f;
  table[AH_ALGO_TREE * AH_NUM_PROTOS + AH_PROTO_LL] = 0.0f;
  c.algo = AH_ALGO_RING;
  c.proto = AH_PROTO_SIMPLE;
  ck_assert(ah_config_allowed_table(&c, table, AH_NUM_ALGOS, AH_NUM_PROTOS));
  c.proto = AH_PROTO_LL;
  ck_assert(!ah_config_allowed_table(&c, table, AH_NUM_ALGOS, AH_NUM_PROTOS));
  c.algo = AH_ALGO_TREE;
  ck_assert(
      ah_config_allowed_table(&c, table, AH_NUM_ALGOS, AH_NUM_PROTOS)); /* cost 0 is allowed */
  c.algo = -1;
  c.proto = AH_PROTO_LL128;
  ck_assert(!ah_config_allowed_table(&c, table, AH_NUM_ALGOS, AH_NUM_PROTOS));
  c.algo = AH_ALGO_PAT;
  c.proto = -1;
  ck_assert(!ah_config_allowed_table(&c, table, AH_NUM_ALGOS, AH_NUM_PROTOS));
  /* An algorithm the (older) table has no row for is refused, not read out of bounds. */
  ck_assert(!ah_config_allowed_table(&c, table, AH_ALGO_PAT, AH_NUM_PROTOS));
  ck_assert(!ah_config_allowed_table(&c, NULL, AH_NUM_ALGOS, AH_NUM_PROTOS));
}
END_TEST

START_TEST(sizes) {
  uint64_t v = 7;
  ck_assert_int_eq(ah_size_parse("0", 1, &v), 0);
  ck_assert_uint_eq(v, 0);
  ck_assert_int_eq(ah_size_parse("512", 3, &v), 0);
  ck_assert_uint_eq(v, 512);
  ck_assert_int_eq(ah_size_parse("4k", 2, &v), 0);
  ck_assert_uint_eq(v, 4096);
  ck_assert_int_eq(ah_size_parse("64MiB", 5, &v), 0);
  ck_assert_uint_eq(v, 64 * MIB);
  ck_assert_int_eq(ah_size_parse("2GB", 3, &v), 0);
  ck_assert_uint_eq(v, 2048 * MIB);
  ck_assert_int_eq(ah_size_parse("10b", 3, &v), 0);
  ck_assert_uint_eq(v, 10);
  v = 7;
  ck_assert_int_eq(ah_size_parse("", 0, &v), -1);
  ck_assert_int_eq(ah_size_parse("K", 1, &v), -1);
  ck_assert_int_eq(ah_size_parse("-1", 2, &v), -1);
  ck_assert_int_eq(ah_size_parse("1T", 2, &v), -1);
  ck_assert_int_eq(ah_size_parse("1 K", 3, &v), -1);
  ck_assert_int_eq(ah_size_parse("18446744073709551616", 20, &v), -1);
  ck_assert_int_eq(ah_size_parse("17179869184G", 12, &v), -1);
  ck_assert_uint_eq(v, 7);
  char buf[32];
  ck_assert_str_eq(ah_size_format(0, buf, sizeof buf), "0");
  ck_assert_str_eq(ah_size_format(1000, buf, sizeof buf), "1000");
  ck_assert_str_eq(ah_size_format(3072, buf, sizeof buf), "3K");
  ck_assert_str_eq(ah_size_format(64 * MIB, buf, sizeof buf), "64M");
  ck_assert_str_eq(ah_size_format(3 * 1024 * MIB, buf, sizeof buf), "3G");
  ck_assert_str_eq(ah_size_format(MIB + 1, buf, sizeof buf), "1048577");
}
END_TEST

/* Random strings built from the grammar's own tokens, with random damage: the parser never
 * overruns, counts errors and rules consistently, and every rule it keeps formats back to a string
 * that parses to the same rule (the canonical form `autoha check-override` prints). */
START_TEST(random_strings_round_trip) {
  static const char *const colls[] = {"allreduce", "allgather", "reducescatter",
                                      "broadcast", "reduce",    "*",
                                      "bcast",     "AllReduce", "x"};
  static const char *const ranges[] = {"",        "",  "@1M-64M", "@-4K", "@2G-",      "@512",
                                       "@64M-1M", "@", "@-",      "@3Q",  "@ 1K - 2K "};
  static const char *const fields[] = {
      "algo=ring",   "algo=tree",  "algo=NVLSTree", "proto=simple", "proto=ll128",  "nchannels=16",
      "nchannels=1", "chunk=512K", "chunk=1G",      "algo=rong",    "nchannels=65", "chunk=0",
      "x=1",         "",           " proto = ll "};
  static const char *const seps[] = {";", ";", "; ", ";;", ":", ","};
#define PICK(a)                                                                                    \
  (a[((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) %                       \
     (uint64_t)(sizeof a / sizeof a[0])])
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int kept_total = 0, err_total = 0;
  for (int iter = 0; iter < 5000; iter++) {
    char s[1024] = "";
    int nrules = 1 + iter % 5;
    for (int r = 0; r < nrules; r++) {
      if (r) strcat(s, PICK(seps));
      strcat(s, PICK(colls));
      strcat(s, PICK(ranges));
      strcat(s, ":");
      int nf = 1 + (iter + r) % 3;
      for (int f = 0; f < nf; f++) {
        if (f) strcat(s, ",");
        strcat(s, PICK(fields));
      }
    }
    ah_override_t ov;
    char err[256];
    memset(err, 'z', sizeof err);
    int nerr = ah_override_parse(s, &ov, err, sizeof err);
    err_total += nerr;
    ck_assert_int_ge(nerr, 0);
    ck_assert_int_le(ov.nrules, AH_OVERRIDE_MAX_RULES);
    ck_assert_int_le(ov.nrules + nerr, nrules * 2 + 1);
    ck_assert(memchr(err, 0, sizeof err) != NULL);
    ck_assert_int_eq(nerr == 0, err[0] == 0);
    for (int r = 0; r < ov.nrules; r++) {
      const ah_override_rule_t *rule = &ov.rules[r];
      ck_assert_int_ge(rule->pos, 0);
      ck_assert_int_lt(rule->pos, (int)strlen(s));
      ck_assert_uint_le(rule->lo, rule->hi);
      char canon[256];
      ah_override_rule_format(rule, canon, sizeof canon);
      ah_override_t back;
      ck_assert_msg(ah_override_parse(canon, &back, NULL, 0) == 0 && back.nrules == 1,
                    "'%s' from '%s' does not parse back", canon, s);
      ck_assert_int_eq(back.rules[0].coll, rule->coll);
      ck_assert_uint_eq(back.rules[0].lo, rule->lo);
      ck_assert_uint_eq(back.rules[0].hi, rule->hi);
      ck_assert(ah_config_equal(&back.rules[0].cfg, &rule->cfg));
      kept_total++;
    }
  }
#undef PICK
  /* The generator produces both: rules that are kept and errors. */
  ck_assert_int_gt(kept_total, 1000);
  ck_assert_int_gt(err_total, 1000);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {parse_example,
                                parse_forms,
                                parse_errors_name_token_and_position,
                                parse_limits,
                                match_most_specific,
                                allowed_pairs,
                                sizes,
                                random_strings_round_trip};
  return ah_check_main("tuner_override", (ah_check_case_t){.name = "override", .timeout = 10},
                       tests, AH_CHECK_COUNT(tests));
}
