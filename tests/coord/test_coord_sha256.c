/* The coordinator's built-in SHA-256 and HMAC-SHA256 against the published vectors: FIPS 180-4's
 * examples (one block, two blocks, a million 'a's across many updates' worth of blocks) and
 * RFC 4231's HMAC cases 1-4, 6 and 7 (short keys, a key of 131 bytes hashed first), plus lengths
 * 55, 56 and 64, where the padding spills into a second block. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "ah_coord_sha256.h"

static void hex(const uint8_t *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

static void check_sha(const void *msg, size_t len, const char *want) {
  uint8_t d[32];
  char got[65];
  ah_coord_sha256(msg, len, d);
  hex(d, 32, got);
  ck_assert_str_eq(got, want);
}

static void check_hmac(const void *key, size_t klen, const void *msg, size_t len,
                       const char *want) {
  uint8_t d[32];
  char got[65];
  ah_coord_hmac_sha256(key, klen, msg, len, d);
  hex(d, 32, got);
  ck_assert_str_eq(got, want);
}

START_TEST(sha256_vectors) {
  check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  check_sha(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  char *a = malloc(1000000);
  ck_assert_ptr_nonnull(a);
  memset(a, 'a', 1000000);
  check_sha(a, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  check_sha(a, 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  check_sha(a, 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  check_sha(a, 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  free(a);
}
END_TEST

START_TEST(hmac_rfc4231) {
  uint8_t k[131];
  memset(k, 0x0b, 20);
  check_hmac(k, 20, "Hi There", 8,
             "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  check_hmac("Jefe", 4, "what do ya want for nothing?", 28,
             "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  uint8_t m[50];
  memset(k, 0xaa, 20);
  memset(m, 0xdd, 50);
  check_hmac(k, 20, m, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  for (int i = 0; i < 25; i++) k[i] = (uint8_t)(i + 1);
  memset(m, 0xcd, 50);
  check_hmac(k, 25, m, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  memset(k, 0xaa, 131);
  const char *t6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  check_hmac(k, 131, t6, strlen(t6),
             "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  const char *t7 =
      "This is a test using a larger than block-size key and a larger than block-size data. "
      "The key needs to be hashed before being used by the HMAC algorithm.";
  check_hmac(k, 131, t7, strlen(t7),
             "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}
END_TEST

int main(void) {
  const TTest *const tests[] = {sha256_vectors, hmac_rfc4231};
  return ah_check_main("coord_sha256", (ah_check_case_t){.name = "vectors", .timeout = 10}, tests,
                       AH_CHECK_COUNT(tests));
}
