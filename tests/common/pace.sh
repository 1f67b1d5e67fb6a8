# Sourced by the end-to-end scripts that bound a wall-clock latency: pace_factor prints how much
# slower than its own CPU time a fixed CPU-bound loop ran just now (wall / (user + sys), at least
# 1), which is the share of a core this machine gives a process at the moment. A bound's slack is
# multiplied by it, so a loaded machine (other builds, `stress --cpu 4`) stretches the bound by the
# load it measured instead of failing a healthy job, while on a quiet machine the bound is as
# written.
pace_factor() {
  local TIMEFORMAT='%R %U %S' t
  t=$({ time awk 'BEGIN { for (i = 0; i < 3000000; i++) s += i % 7 }' >/dev/null; } 2>&1)
  awk -v t="$t" 'BEGIN { split(t, a, " "); c = a[2] + a[3]; f = c > 0 ? a[1] / c : 1
    printf "%.2f", f < 1 ? 1 : f }'
}
