/* ctor_main: linked against ctor_nccl, whose constructor ran NCCL before main. */
#include <stdio.h>

extern int ctor_nccl_status;

int main(void) {
  printf("ctor_nccl_status=%d\n", ctor_nccl_status);
  return ctor_nccl_status == 0 ? 0 : 1;
}
