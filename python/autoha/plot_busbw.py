"""The first picture: bus bandwidth against bytes per rank for every key of the job, NCCL's default
and the configuration autoha applied as two series per collective (and communicator size).

Each point is one key (size bin): the median over the reports holding it of the stat's `busbw_gbs`
and `bytes_mean` (the figures `autoha report` prints per key).
"""
import statistics

from autoha.plot_common import figure, size_text, title

COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
           "tab:pink", "tab:olive"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]  # so series that coincide stay visible


def series(reports):
    """Returns {(coll, nranks): {"default": [(bytes, busbw)...], "applied": [...]}}, points sorted
    by size. A key whose stat was never timed (busbw null) gives no point for that stat."""
    acc = {}
    for r in reports:
        for c in r.get("comms", []):
            for k in c.get("keys", []):
                for stat in ("default", "applied"):
                    s = k.get(stat) or {}
                    if s.get("busbw_gbs") is None or not s.get("bytes_mean"):
                        continue
                    pts = acc.setdefault((k["coll"], c["nranks"]), {}).setdefault(
                        stat, {}).setdefault(k["bin"], ([], []))
                    pts[0].append(s["bytes_mean"])
                    pts[1].append(s["busbw_gbs"])
    out = {}
    for g, stats in sorted(acc.items()):
        out[g] = {st: sorted((statistics.median(b), statistics.median(w))
                             for b, w in bins.values()) for st, bins in stats.items()}
    return out


def draw(reports):
    """Returns the busbw Figure of `reports` (as autoha.report_io.load gives them)."""
    fig = figure(9, 5.5)
    ax = fig.add_subplot()
    groups = series(reports)
    sizes = {n for _, n in groups}
    ticks = set()
    for i, ((coll, n), st) in enumerate(groups.items()):
        name = coll if len(sizes) == 1 else f"{coll} ({n} ranks)"
        col, mk = COLOURS[i % len(COLOURS)], MARKERS[i % len(MARKERS)]
        for stat, style, label in (("default", "--", "NCCL default"), ("applied", "-", "autoha")):
            pts = st.get(stat)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker=mk, color=col,
                        markerfacecolor="none" if stat == "default" else col,
                        alpha=0.6 if stat == "default" else 1.0, label=f"{name}: {label}")
                ticks.update(p[0] for p in pts)
    ax.set_xscale("log", base=2)
    if ticks:
        lo, hi = min(ticks), max(ticks)
        t = [1 << e for e in range(int(lo).bit_length() - 1, int(hi).bit_length() + 1)]
        ax.set_xticks(t, [size_text(v) for v in t])
    ax.set_xlabel("bytes per rank (B, log scale)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.grid(True, which="major", alpha=0.3)
    if groups:
        ax.legend(loc="upper left", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no timed keys in these reports", ha="center", transform=ax.transAxes)
    nranks = ", ".join(str(n) for n in sorted(sizes)) or "?"
    title(fig, f"busbw against bytes per rank: NCCL's default (dashed) vs autoha (solid)\n"
               f"{len(reports)} reports, communicators of {nranks} ranks", reports)
    return fig
