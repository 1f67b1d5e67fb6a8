/* Unit test of base/ah_uthash.h: with uthash's non-fatal out-of-memory mode, an add whose
 * allocation fails is refused — AH_HASH_ADDED says so, the table keeps every item it had and stays
 * usable — instead of uthash calling exit() inside the user's process. Allocations are failed on
 * demand through uthash_malloc. */
#include <check.h>
#include <stdlib.h>

static int nalloc, fail_at = -1; /* the allocation numbered fail_at fails */

static void *test_malloc(size_t sz) { return nalloc++ == fail_at ? NULL : malloc(sz); }
#define uthash_malloc(sz) test_malloc(sz)
#include "ah_check.h"
#include "ah_uthash.h"

typedef struct {
  int key;
  UT_hash_handle hh;
} item_t;

#define NITEMS 2000

START_TEST(first_add_refused) {
  item_t *head = NULL, a = {.key = 1};
  nalloc = 0;
  fail_at = 0; /* the table itself cannot be made */
  HASH_ADD_INT(head, key, &a);
  ck_assert(!AH_HASH_ADDED(&a));
  ck_assert_ptr_null(head);
  fail_at = -1;
  HASH_ADD_INT(head, key, &a);
  ck_assert(AH_HASH_ADDED(&a));
  ck_assert_ptr_eq(head, &a);
  HASH_CLEAR(hh, head);
}
END_TEST

START_TEST(growth_refused) {
  static item_t items[NITEMS];
  item_t *head = NULL, *found;
  int added = 0, refused = 0;
  nalloc = 0;
  for (int i = 0; i < NITEMS; i++) {
    items[i].key = i;
    fail_at =
        i == 0 ? -1 : nalloc; /* after the first add, every allocation the table tries fails */
    HASH_ADD_INT(head, key, &items[i]);
    if (AH_HASH_ADDED(&items[i])) added++;
    else refused++;
  }
  ck_assert_int_gt(refused, 0); /* the table had to grow, and could not */
  ck_assert_int_eq((int)HASH_COUNT(head), added);
  for (int i = 0; i < NITEMS; i++) {
    HASH_FIND_INT(head, &i, found);
    ck_assert_ptr_eq(found, AH_HASH_ADDED(&items[i]) ? &items[i] : NULL);
  }
  fail_at = -1; /* memory is back: the refused items go in, the table is whole */
  for (int i = 0; i < NITEMS; i++)
    if (!AH_HASH_ADDED(&items[i])) HASH_ADD_INT(head, key, &items[i]);
  ck_assert_int_eq((int)HASH_COUNT(head), NITEMS);
  for (int i = 0; i < NITEMS; i++) {
    HASH_FIND_INT(head, &i, found);
    ck_assert_ptr_eq(found, &items[i]);
  }
  HASH_CLEAR(hh, head);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {first_add_refused, growth_refused};
  return ah_check_main("ah_uthash", (ah_check_case_t){.name = "oom", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
