/* bench_proc.h: what a benchmark reads of a process it started (a hub, a CPU hog) from /proc. */
#ifndef AH_BENCH_PROC_H
#define AH_BENCH_PROC_H

#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* CPU seconds (user + system) process pid has used so far, or -1. */
static inline double bench_proc_cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* fields after the command name: state is field 3 */
  unsigned long long ut = 0, st = 0;
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds the hypervisor has taken from this machine's CPUs so far, summed over them ("steal",
 * the 8th figure of /proc/stat's cpu line), or -1. On a virtual machine sharing its host, stolen
 * time stops every thread of a benchmark at once, whatever it runs: a figure measured while it
 * was high says more about the host than about the code. */
static inline double bench_machine_steal_s(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long steal = 0;
  int n = fscanf(f, "cpu %*u %*u %*u %*u %*u %*u %*u %llu", &steal);
  fclose(f);
  return n == 1 ? (double)steal / (double)sysconf(_SC_CLK_TCK) : -1;
}

#endif
