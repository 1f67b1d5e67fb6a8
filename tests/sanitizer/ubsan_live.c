/* Deliberately overflows a signed int: UndefinedBehaviorSanitizer, built with
 * -fno-sanitize-recover=all, must stop the program with a non-zero status (the CTest is WILL_FAIL).
 * The operand comes from argc so the compiler cannot fold it. */
#include <limits.h>
#include <stdio.h>

int main(int argc, char **argv) {
  (void)argv;
  int x = INT_MAX - 1 + argc; /* INT_MAX */
  x += argc;                  /* overflow */
  printf("overflowed to %d without a sanitizer report\n", x);
  return 0;
}
