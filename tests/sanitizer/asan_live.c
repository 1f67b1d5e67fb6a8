/* Deliberately reads one element past a heap block: AddressSanitizer must stop the program with a
 * non-zero status (the CTest is WILL_FAIL). The index comes from argc so the compiler cannot prove
 * the overflow and drop the read. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  (void)argv;
  int *a = malloc(4 * sizeof *a);
  if (!a) return 0;
  for (int i = 0; i < 4; i++) a[i] = i;
  int v = a[3 + argc]; /* argc is 1: index 4, one past the end */
  printf("read %d past the end without a sanitizer report\n", v);
  free(a);
  return 0;
}
