/* ncclsim-run: starts the N rank processes of a job on sim/, as torchrun or mpirun would on real
 * machines, and ends when they have all ended.
 *
 *   ncclsim-run -n N [--nodes M] [--preload] [--] CMD [ARGS...]
 *
 * Each rank gets torchrun's environment — RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 * GROUP_RANK, GROUP_WORLD_SIZE, ROLE_*, TORCHELASTIC_*, MASTER_ADDR and MASTER_PORT (a free port
 * for torch's TCPStore, unless set) — plus NCCLSIM_NODE (ranks are placed on M virtual nodes in
 * blocks of N/M), NCCLSIM_NODES (M: the size of the simulated fabric), NCCLSIM_RDZV (a fresh
 * folder for ncclsimExchangeUniqueId) and NCCLSIM_SHM_PREFIX (so the job's shared segments have
 * names of their own, which are removed at the end even when ranks crashed). With --preload,
 * sim/'s stand-ins for libcudart.so.13/.12, libcuda.so.1 and libnccl.so.2 are appended to
 * LD_PRELOAD (after what is there, so an interposer such as
 * libautoha.so stays in front), so they replace whatever copies the program's RPATH names. The
 * launcher forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to every rank, and exits
 * with the worst rank's status: 128+N for the first rank killed by signal N, else the highest exit
 * code.
 *
 * The key choice is how a failure ends the job: when a rank dies abnormally, the others are given
 * NCCLSIM_RUN_GRACE_S seconds (default 15) to notice through sim/ and fail with their own error;
 * any still running are then sent SIGTERM, and SIGKILL 3 s later. So a job with a dead rank ends
 * within about 20 s, even when a survivor is stuck outside NCCL. */
#include <dirent.h>
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 1024

static pid_t pids[MAX_RANKS];
static volatile sig_atomic_t nstarted;
static volatile sig_atomic_t got_signal;

static void forward(int sig) {
  got_signal = sig;
  for (int i = 0; i < nstarted; i++)
    if (pids[i] > 0) kill(pids[i], sig);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(void) {
  fprintf(stderr,
          "usage: ncclsim-run -n N [--nodes M] [--preload] [--] CMD [ARGS...]\n"
          "  Starts N ranks of CMD on sim/, on M virtual nodes (default 1; M must divide N).\n"
          "  Sets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
          "  GROUP_RANK, MASTER_ADDR, MASTER_PORT, ...), NCCLSIM_NODE(S), NCCLSIM_RDZV and\n"
          "  NCCLSIM_SHM_PREFIX; exits with the worst rank's status.\n"
          "  --preload: preload sim/'s libcudart.so.13/.12, libcuda.so.1 and libnccl.so.2\n"
          "  stand-ins, so they win over the program's RPATH (a PyTorch wheel's, say).\n");
}

static int parse_count(const char *opt, const char *s, int max, int *out) {
  char *end;
  errno = 0;
  long v = s ? strtol(s, &end, 10) : 0;
  if (!s || errno || *end || v < 1 || v > max) {
    fprintf(stderr, "ncclsim-run: invalid value for %s: '%s' (expected 1..%d)\n", opt,
            s ? s : "(missing)", max);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static double grace_s(void) {
  const char *s = getenv("NCCLSIM_RUN_GRACE_S");
  if (!s || !*s) return 15.0;
  char *end;
  double v = strtod(s, &end);
  if (*end || !(v >= 0) || v > 3600) {
    fprintf(stderr,
            "ncclsim-run: invalid value for NCCLSIM_RUN_GRACE_S: '%s' (expected seconds "
            "0..3600); using 15\n",
            s);
    return 15.0;
  }
  return v;
}

static void setenv_int(const char *name, int v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%d", v);
  setenv(name, buf, 1);
}

/* A TCP port on 127.0.0.1 that is free now (the kernel's choice), for torch's TCPStore; 0 when
 * none could be had. Rank 0 binds it moments later, as with torchrun's own choice. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static const char *const standins[] = {"libcuda.so.1", "libcudart.so.13", "libcudart.so.12",
                                       "libnccl.so.2"};

/* The folder of the stand-ins: NCCLSIM_PRELOAD_DIR; else, for an installed ncclsim-run, the
 * installed layout's folder relative to this program (bin/../lib/autoha-sim/preload) when it
 * exists; else the build tree's. Note that the installed folder comes before the build tree's: an
 * installed program must not reach into a build tree that may have moved on (or gone), and a
 * build-tree program has no such folder beside it. */
static const char *preload_dir(char *buf, size_t len) {
  const char *dir = getenv("NCCLSIM_PRELOAD_DIR");
  if (dir && *dir) return dir;
#ifdef NCCLSIM_BIN_TO_PRELOAD
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  char *slash = n > 0 ? (self[n] = 0, strrchr(self, '/')) : NULL;
  if (slash) {
    *slash = 0;
    char probe[4300];
    snprintf(buf, len, "%s/%s", self, NCCLSIM_BIN_TO_PRELOAD);
    snprintf(probe, sizeof probe, "%s/%s", buf, "libcuda.so.1");
    char real[PATH_MAX];
    if (access(probe, R_OK) == 0) {
      if (realpath(buf, real)) snprintf(buf, len, "%s", real); /* without "bin/.." */
      return buf;
    }
  }
#else
  (void)buf, (void)len;
#endif
  return NCCLSIM_PRELOAD_DEFAULT;
}

/* Appends sim/'s stand-ins to LD_PRELOAD. Returns -1 (with a message) when one is missing. */
static int add_preload(void) {
  char buf[4200];
  const char *dir = preload_dir(buf, sizeof buf);
  const char *old = getenv("LD_PRELOAD");
  size_t cap = (old ? strlen(old) : 0) + 4 * (strlen(dir) + 32) + 1;
  char *v = malloc(cap);
  if (!v) return -1;
  snprintf(v, cap, "%s", old ? old : "");
  for (size_t k = 0; k < sizeof standins / sizeof standins[0]; k++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, standins[k]);
    if (access(path, R_OK) != 0) {
      fprintf(stderr,
              "ncclsim-run: --preload: cannot read %s: %s (set NCCLSIM_PRELOAD_DIR to the "
              "folder of sim/'s stand-ins: build/simlib/preload, or lib/autoha-sim/preload of an "
              "installed prefix)\n",
              path, strerror(errno));
      free(v);
      return -1;
    }
    size_t used = strlen(v);
    snprintf(v + used, cap - used, "%s%s", used ? " " : "", path);
  }
  setenv("LD_PRELOAD", v, 1);
  free(v);
  return 0;
}

/* Removes the rendezvous folder (flat: only files) and the job's leftover shared segments. */
static void cleanup(const char *rdzv, const char *prefix) {
  DIR *d = opendir(rdzv);
  if (d) {
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      snprintf(path, sizeof path, "%s/%s", rdzv, e->d_name);
      unlink(path);
    }
    closedir(d);
    rmdir(rdzv);
  }
  d = opendir("/dev/shm");
  if (d) {
    struct dirent *e;
    char name[300];
    size_t n = strlen(prefix);
    while ((e = readdir(d)) != NULL) {
      if (strncmp(e->d_name, prefix, n) != 0) continue;
      snprintf(name, sizeof name, "/dev/shm/%s", e->d_name);
      unlink(name);
    }
    closedir(d);
  }
}

int main(int argc, char **argv) {
  int n = 0, nodes = 1, preload = 0, i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    }
    if (strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "--nproc") == 0) {
      if (parse_count(argv[i], i + 1 < argc ? argv[i + 1] : NULL, MAX_RANKS, &n)) return 2;
      i++;
    } else if (strcmp(argv[i], "--nodes") == 0) {
      if (parse_count(argv[i], i + 1 < argc ? argv[i + 1] : NULL, MAX_RANKS, &nodes)) return 2;
      i++;
    } else if (strcmp(argv[i], "--preload") == 0) {
      preload = 1;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage();
      return 0;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "ncclsim-run: unknown option '%s'\n", argv[i]);
      usage();
      return 2;
    } else {
      break;
    }
  }
  if (n == 0 || i >= argc) {
    usage();
    return 2;
  }
  if (n % nodes != 0) {
    fprintf(stderr, "ncclsim-run: %d ranks cannot be spread evenly over %d nodes\n", n, nodes);
    return 2;
  }
  int per_node = n / nodes;
  char **cmd = argv + i;

  /* --preload: the stand-ins go on LD_PRELOAD, and the launcher runs itself again with them, once
   * (NCCLSIM_RUN_PRELOADED marks the second start and is removed before the ranks start). On a GPU
   * host every process finds libcuda.so.1; here an interposer preloaded into the launcher too (the
   * autoha shim, which opens libcuda.so.1 for its health thread) finds the simulated one. */
  if (preload) {
    const char *again = getenv("NCCLSIM_RUN_PRELOADED");
    if (!again || strcmp(again, "1") != 0) {
      if (add_preload() != 0) return 2;
      setenv("NCCLSIM_RUN_PRELOADED", "1", 1);
      execv("/proc/self/exe", argv);
      fprintf(stderr, "ncclsim-run: --preload: cannot run itself again: %s\n", strerror(errno));
      return 1;
    }
    unsetenv("NCCLSIM_RUN_PRELOADED");
  }

  char rdzv[4096];
  const char *tmp = getenv("TMPDIR");
  snprintf(rdzv, sizeof rdzv, "%s/ncclsim-rdzv-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(rdzv)) {
    fprintf(stderr, "ncclsim-run: cannot create the rendezvous folder %s: %s\n", rdzv,
            strerror(errno));
    return 1;
  }
  char prefix[64];
  snprintf(prefix, sizeof prefix, "ncclsim-%d-", (int)getpid());

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  const int fwd[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  for (size_t k = 0; k < sizeof fwd / sizeof fwd[0]; k++) sigaction(fwd[k], &sa, NULL);

  /* torchrun's environment: a script that calls init_process_group() with the env:// defaults
   * runs unchanged. MASTER_ADDR/MASTER_PORT set by the caller are kept. */
  setenv_int("WORLD_SIZE", n);
  setenv_int("LOCAL_WORLD_SIZE", per_node);
  setenv_int("GROUP_WORLD_SIZE", nodes);
  setenv_int("NCCLSIM_NODES", nodes); /* the fabric's size: every process builds the same one */
  setenv_int("ROLE_WORLD_SIZE", n);
  setenv("ROLE_NAME", "default", 1);
  setenv("TORCHELASTIC_RESTART_COUNT", "0", 1);
  setenv("TORCHELASTIC_MAX_RESTARTS", "0", 1);
  /* torchrun's default rendezvous id; a caller's id (a job name, say) is kept. */
  setenv("TORCHELASTIC_RUN_ID", "none", 0);
  if (n > 1) setenv("OMP_NUM_THREADS", "1", 0); /* as torchrun: N ranks share the cores */
  setenv("MASTER_ADDR", "127.0.0.1", 0);
  /* Every simulated node is this machine: the job's autoha hub binds loopback, as MASTER_ADDR is,
   * unless the caller chose an interface (a preloaded autoha otherwise binds the host's first
   * non-loopback address, as a multi-node job needs) */
  setenv("AUTOHA_COORD_IFNAME", "lo", 0);
  const char *mp = getenv("MASTER_PORT");
  if (!mp || !*mp) {
    int port = free_port();
    if (port == 0) {
      fprintf(stderr, "ncclsim-run: cannot find a free TCP port for MASTER_PORT: %s\n",
              strerror(errno));
      cleanup(rdzv, prefix);
      return 1;
    }
    setenv_int("MASTER_PORT", port);
  }
  setenv("NCCLSIM_RDZV", rdzv, 1);
  setenv("NCCLSIM_SHM_PREFIX", prefix, 1);
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "ncclsim-run: fork for rank %d failed: %s\n", r, strerror(errno));
      forward(SIGTERM);
      break;
    }
    if (pid == 0) {
      for (size_t k = 0; k < sizeof fwd / sizeof fwd[0]; k++) signal(fwd[k], SIG_DFL);
      setenv_int("RANK", r);
      setenv_int("LOCAL_RANK", r % per_node);
      setenv_int("GROUP_RANK", r / per_node);
      setenv_int("ROLE_RANK", r);
      setenv_int("NCCLSIM_NODE", r / per_node);
      execvp(cmd[0], cmd);
      fprintf(stderr, "ncclsim-run: cannot run '%s' for rank %d: %s\n", cmd[0], r, strerror(errno));
      _exit(127);
    }
    pids[r] = pid;
    nstarted = r + 1;
  }

  int started = nstarted, alive = started, worst_sig = 0, worst_code = 0;
  double failed_at = -1, termed_at = -1;
  while (alive > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno != EINTR) break;
    if (pid <= 0) {
      double t = now_s();
      if (failed_at >= 0 && termed_at < 0 && t - failed_at > grace_s()) {
        fprintf(stderr,
                "ncclsim-run: %d rank(s) still running %.0f s after a rank failed; "
                "sending SIGTERM\n",
                alive, grace_s());
        forward(SIGTERM);
        termed_at = t;
      } else if (termed_at >= 0 && t - termed_at > 3) {
        forward(SIGKILL);
        termed_at = t + 1e9; /* once */
      }
      usleep(10000);
      continue;
    }
    int r;
    for (r = 0; r < started && pids[r] != pid; r++) {}
    if (r == started) continue;
    pids[r] = -pid; /* reaped: no more signals to it */
    alive--;
    if (WIFSIGNALED(status)) {
      if (!got_signal)
        fprintf(stderr, "ncclsim-run: rank %d (pid %d) was killed by signal %d (%s)\n", r, (int)pid,
                WTERMSIG(status), strsignal(WTERMSIG(status)));
      if (!worst_sig) worst_sig = WTERMSIG(status);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      if (!got_signal)
        fprintf(stderr, "ncclsim-run: rank %d (pid %d) exited with status %d\n", r, (int)pid,
                WEXITSTATUS(status));
      if (WEXITSTATUS(status) > worst_code) worst_code = WEXITSTATUS(status);
    } else {
      continue;
    }
    if (failed_at < 0) failed_at = now_s();
  }
  cleanup(rdzv, prefix);
  if (started < n) return worst_code ? worst_code : 1;
  if (worst_sig) return 128 + worst_sig;
  return worst_code;
}
