"""The second picture: the tuning timeline, one panel per key of each communicator (from the report
of its lowest rank, the leader that searched, or of the rank asked for), over the key's call indices, with the search phase
zoomed; above them, the job's wall clock with the findings (`health`) and failovers (`ha.events`).

Note that a report holds each probe's samples and time, not when each sample ran (the search
interleaves them), so the probes are drawn one after another in the order the search planned them,
each as wide as its samples, across the calls the search spent. Keys' calls carry no timestamps, so only findings, failovers and the report's writing have a
place on the wall clock.
"""
import math
import re

from autoha.plot_common import figure, size_text, title

NCCL_ROW = "NCCL's choice"
HEALTH_STYLE = {  # kind: (marker, colour)
    "missing": ("v", "tab:red"), "incomplete": ("v", "tab:orange"), "mismatch": ("X", "tab:red"),
    "straggler": ("s", "tab:orange"), "slow_link": ("D", "tab:orange"),
    "resumed": ("^", "tab:green"), "recovered": ("^", "tab:green"), "link_ok": ("o", "tab:green"),
    "nic_down": ("P", "tab:red"),
}


def probe_colour(us, default_us):
    """Green when faster than NCCL's default beyond 5 %, orange within 5 %, red slower, grey unknown."""
    if us is None or not default_us:
        return "#bbbbbb"
    r = us / default_us
    return "#4daf4a" if r < 0.95 else "#fdae61" if r <= 1.05 else "#d7301f"


def leader_keys(reports, rank=None):
    """Returns [(report, comm, key)] for every key of every communicator, from the report holding
    the communicator's `rank` when one does, else its lowest rank, sorted by communicator,
    collective and bin."""
    def better(c, b):
        if rank is not None and (c["rank"] == rank) != (b["rank"] == rank):
            return c["rank"] == rank
        return c["rank"] < b["rank"]
    best = {}
    for r in reports:
        for c in r.get("comms", []):
            if c["id"] not in best or better(c, best[c["id"]][1]):
                best[c["id"]] = (r, c)
    return [(r, c, k) for _, (r, c) in sorted(best.items())
            for k in sorted(c.get("keys", []), key=lambda k: (k["coll"], k["bin"]))]


def key_panel(ax, c, k):
    """Draws one key: a row per configuration (y), its calls as a bar over the call index (x)."""
    calls = max(k.get("calls") or 1, 1)
    d, a = k.get("default") or {}, k.get("applied") or {}
    b = k.get("bytes") or {}
    name = (f"{k['coll']} {size_text(b.get('bin_min', 0))}-{size_text(b.get('bin_max', 0) + 1)}, "
            f"comm {c['id'][-4:]} ({c['nranks']} ranks)")
    t = k.get("tuning")
    rows, bars = [], []  # rows: y labels bottom-up; bars: (row, start, width, colour)

    def row(label):
        if label not in rows:
            rows.append(label)
        return rows.index(label)

    def us(v):
        return "not timed" if v is None else f"{v:.1f} us"

    if not t:
        src = k.get("source", "default")
        cfg = (a.get("config") or {}).get("text", "auto")
        label = NCCL_ROW if src == "default" else f"{src}: {cfg}"
        bars.append((row(f"{label} ({us(a.get('time_us'))})"), 0, calls,
                     "#d9d9d9" if src == "default" else "#6baed6"))
        end, note = calls, f"{src}, {calls} calls"
    else:
        state = t.get("state")
        spent = t.get("calls_spent") or 0
        end = (t["converged_at"] if state == "converged" and t.get("converged_at") is not None
               else calls if state == "searching" else min(calls, spent))
        probes = t.get("probes") or []
        samples = sum(p.get("samples") or 0 for p in probes)
        x = 0.0
        for p in probes:
            w = end * (p.get("samples") or 0) / samples if samples else 0
            cfg = (p.get("config") or {}).get("text", "auto")
            bars.append((row(f"{cfg} ({us(p.get('time_us'))})"), x, w,
                         probe_colour(p.get("time_us"), t.get("default_us"))))
            x += w
        winner = (t.get("winner") or {}).get("text", "auto")
        if state == "converged":
            bars.append((row(f"pinned {winner} ({us(a.get('time_us'))})"), end, calls - end,
                         "#2171b5"))
            sp = k.get("speedup")
            note = (f"converged at call {end} of {calls}"
                    + (f", {sp:.2f}x NCCL" if sp else ""))
        elif state == "default":
            bars.append((row(f"{NCCL_ROW} ({us(d.get('time_us'))})"), end, calls - end, "#d9d9d9"))
            note = f"kept NCCL's choice after {t.get('probes_count', len(probes))} probes"
        else:
            note = f"still searching: {len(probes)} probes in {calls} calls"
        if t.get("reopened"):
            note += f"; re-opened {t['reopened']}x by drift"
            ax.plot([end], [len(rows) - 0.4], "v", color="red", label="re-opened")
    for y, x0, w, col in bars:
        if w > 0:
            ax.barh(y, w, left=x0, height=0.7, color=col, edgecolor="white", linewidth=0.5)
    ax.set_yticks(range(len(rows)), rows, fontsize="x-small")
    ax.set_ylim(-0.6, len(rows) - 0.4)
    # The search zoomed: the x axis runs to a quarter past the search's end (or all the calls when
    # the search took most of them); the title says what is off to the right.
    lim = calls if end >= 0.6 * calls else max(end * 1.25, 1)
    ax.set_xlim(0, lim)
    ax.set_xlabel("call index" + (f" (zoomed: 0-{lim:.0f} of {calls})" if lim < calls else ""),
                  fontsize="small")
    ax.set_title(f"{name}\n{note}", fontsize="small")
    ax.tick_params(axis="x", labelsize="x-small")


def finding_label(h):
    """The legend entry of a finding: its kind and the rank its line names first (the one at
    fault: "rank 2 (host pid ...) never entered ..."), since the row it sits on is the process that
    received it, which is every process of the job, not the rank to blame."""
    m = re.search(r"\brank (\d+) \(", h.get("text") or "")
    return f"finding: {h.get('kind')}" + (f", naming rank {m.group(1)}" if m else "")


def events_panel(ax, reports):
    """Draws the job's wall clock: a row per report, its findings and failovers, and when each
    report was written; returns how many findings and failovers were drawn."""
    pts = []  # (time, row, marker, colour, label)
    names = []
    for i, r in enumerate(sorted(reports, key=lambda r: (r.get("rank", -1), r.get("pid", 0)))):
        names.append(f"rank {r.get('rank')} ({r.get('host')}, pid {r.get('pid')})")
        for h in r.get("health") or []:
            m, col = HEALTH_STYLE.get(h.get("kind"), ("o", "grey"))
            if h.get("time") is not None:
                pts.append((h["time"], i, m, col, finding_label(h)))
        for e in (r.get("ha") or {}).get("events") or []:
            if e.get("time") is not None:
                pts.append((e["time"], i, "*", "black", "failover"))
        if r.get("time") is not None:
            pts.append((r["time"], i, "|", "grey", "report written"))
    if not pts:
        ax.set_axis_off()
        return 0
    t0 = min(p[0] for p in pts)
    seen = set()
    for t, y, m, col, label in pts:
        ax.plot([t - t0], [y], m, color=col, markersize=9 if m == "*" else 7,
                label=None if label in seen else label)
        seen.add(label)
    span = max(p[0] for p in pts) - t0
    ax.set_xlim(-0.05 * max(span, 1), max(span, 1) * 1.05)
    ax.set_yticks(range(len(names)), names, fontsize="x-small")
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_xlabel("wall clock (s since the first event)", fontsize="small")
    n = sum(1 for p in pts if p[4] != "report written")
    ax.set_title(f"the job's findings (health, on the row of each process that received one) and "
                 f"failovers (ha): {n}\n(calls carry no times, so keys are below by call index)",
                 fontsize="small")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="x-small")
    ax.tick_params(axis="x", labelsize="x-small")
    return n


def draw(reports, ncols=2, rank=None):
    """Returns the timeline Figure of `reports` (as autoha.report_io.load gives them), each
    communicator as `rank` saw it (default: its lowest rank)."""
    keys = leader_keys(reports, rank)
    nrows = max(1, math.ceil(len(keys) / ncols))
    fig = figure(6.5 * ncols, 2.0 + 2.6 * nrows + 0.18 * len(reports))
    gs = fig.add_gridspec(nrows + 1, ncols,
                          height_ratios=[0.8 + 0.18 * len(reports)] + [2.6] * nrows)
    events_panel(fig.add_subplot(gs[0, :]), reports)
    for i, (_, c, k) in enumerate(keys):
        key_panel(fig.add_subplot(gs[1 + i // ncols, i % ncols]), c, k)
    title(fig, "tuning timeline per key: probes (green faster than NCCL's default,\n"
               "orange within 5 %, red slower), then the pinned configuration (blue) or NCCL's "
               "choice (grey)",
          reports)
    return fig
