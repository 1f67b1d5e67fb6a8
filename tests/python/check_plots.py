"""Checks the Python package's pictures and table of one sim/ job (run_plots_e2e.sh):

- the PNGs `autoha plot` (the program, which runs `python3 -m autoha plot`) wrote are non-empty
  and decode (matplotlib.image.imread), and the program printed both paths;
- the Figures (autoha.plots.figures, before saving) hold their titles, axis labels with units, a
  legend entry per collective for NCCL's default and for autoha, a panel per key, and the
  "simulated (sim/)" caption; no text artist extends beyond the figure (the labels-never-clipped
  check: each text's rendered extent against the figure's bbox);
- findings and failovers are marked on the job's timeline: the same reports with a made-up health
  entry and failover added (copies, not the job's files) give their legend entries;
- autoha.reports() has one row per (report, communicator, key) and each row's calls is the JSON's.

    check_plots.py REPORTS_DIR PICS_DIR NPROCS
"""
import copy
import glob
import json
import os
import sys

import matplotlib.image
from matplotlib.text import Text

import autoha
from autoha import plot_busbw, plot_timeline, plots
from autoha.report_io import load

failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def texts(fig):
    """Every Text artist the figure draws: titles, labels, legend, and the tick labels of the ticks
    inside each axis's view (matplotlib keeps Text objects for ticks it does not draw)."""
    ticks = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            ticks.update(id(t) for tk in axis.get_major_ticks() + axis.get_minor_ticks()
                         for t in (tk.label1, tk.label2))
            for tk in axis._update_ticks():
                ticks.discard(id(tk.label1)), ticks.discard(id(tk.label2))
    return [t for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip() and id(t) not in ticks]


def unclipped(fig, name):
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = fig.bbox
    out = []
    for t in texts(fig):
        e = t.get_window_extent(r)
        if e.x0 < box.x0 - 1 or e.y0 < box.y0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1:
            out.append(t.get_text()[:50])
    check(not out, f"{name}: no text beyond the figure ({len(texts(fig))} texts; outside: {out})")


def main(rdir, pdir, nprocs):
    files = sorted(glob.glob(os.path.join(rdir, "*.json")))
    js = [json.load(open(f)) for f in files]
    check(len(js) == nprocs, f"{len(js)} reports (expected {nprocs})")
    for name in ("busbw.png", "timeline.png"):
        p = os.path.join(pdir, name)
        ok = os.path.exists(p) and os.path.getsize(p) > 0
        img = matplotlib.image.imread(p) if ok else None
        check(ok and img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100,
              f"{name} written and decodes ({None if img is None else img.shape})")

    figs = dict(plots.figures([rdir]))
    colls = sorted({k["coll"] for r in js for c in r["comms"] for k in c["keys"]})
    bb = figs["busbw.png"]
    ax = bb.axes[0]
    check("bytes per rank" in ax.get_xlabel() and "(B" in ax.get_xlabel(), f"busbw x label: {ax.get_xlabel()!r}")
    check("GB/s" in ax.get_ylabel(), f"busbw y label: {ax.get_ylabel()!r}")
    check(ax.get_xscale() == "log", "busbw x axis is log")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    want = [f"{c}: {s}" for c in colls for s in ("NCCL default", "autoha")]
    check(all(w in legend for w in want), f"busbw legend {legend} has {want}")
    for name, fig in figs.items():
        check(any("simulated (sim/)" in t.get_text() for t in texts(fig)),
              f"{name}: says simulated (sim/)")
        check(bool(fig._suptitle and fig._suptitle.get_text()), f"{name}: has a title")
        unclipped(fig, name)
    tl = figs["timeline.png"]
    nkeys = len(plot_timeline.leader_keys(load([rdir])))
    titles = [a.get_title() for a in tl.axes]
    check(len(tl.axes) == nkeys + 1, f"timeline: {len(tl.axes)} panels, one per key ({nkeys}) + the job's")
    check(all(any(c in t for t in titles) for c in colls), f"timeline: a panel per collective {colls}")
    check(all("call index" in a.get_xlabel() for a in tl.axes[1:]), "timeline: keys' x is the call index")

    # --rank: each communicator's timeline from that rank's report; a rank no report holds refused
    ranks = sorted({c["rank"] for r in js for c in r["comms"]})
    hi = plot_timeline.leader_keys(load([rdir]), rank=ranks[-1])
    check(hi and all(c["rank"] == ranks[-1] for _, c, _ in hi),
          f"timeline --rank {ranks[-1]}: every key from rank {ranks[-1]}'s report")
    try:
        plots.figures([rdir], rank=ranks[-1] + 100)
        check(False, "figures(rank=absent) refused")
    except ValueError as e:
        check(f"no report holds rank {ranks[-1] + 100}" in str(e), f"figures(rank=absent) refused: {e}")

    # Findings and failovers on the job's timeline (made-up entries on copies of the reports).
    reps = copy.deepcopy(load([rdir]))
    t0 = reps[0]["time"]
    reps[0]["health"] = [{"comm": reps[0]["comms"][0]["id"], "kind": "straggler",
                          "text": "made up", "time": t0 - 5},
                         {"comm": reps[0]["comms"][0]["id"], "kind": "missing", "time": t0 - 4,
                          "text": "hang on comm 1: rank 2 (127.0.0.1 pid 9 gpu 0) never entered "
                                  "allgather 2M+ #16, which rank 0 (127.0.0.1 pid 7 gpu 0) entered"}]
    reps[1]["ha"] = {"policy": "port", "failovers": 1, "events": [{"time": t0 - 3, "qp": 1}]}
    ev = plot_timeline.draw(reps)
    labels = [t.get_text() for t in ev.axes[0].get_legend().get_texts()]
    check("finding: straggler" in labels and "failover" in labels,
          f"job timeline marks a finding and a failover: {labels}")
    # the row is the process that received it; the legend names the rank the finding blames
    check("finding: missing, naming rank 2" in labels,
          f"job timeline names the rank a finding blames (rank 2, not rank 0 also cited): {labels}")
    unclipped(ev, "timeline with events")
    bb2 = plot_busbw.draw(reps)
    unclipped(bb2, "busbw of the copies")

    df = autoha.reports(rdir)
    want_rows = sum(len(c["keys"]) for r in js for c in r["comms"])
    check(len(df) == want_rows, f"autoha.reports(): {len(df)} rows (expected {want_rows})")
    cols = {"rank", "host", "pid", "comm", "coll", "bytes_min", "bytes_max", "calls", "nccl_us",
            "applied_config", "applied_us", "busbw_gbs", "speedup", "state"}
    check(cols <= set(df.columns), f"autoha.reports() columns: missing {cols - set(df.columns)}")
    bad = 0
    for r in js:
        for c in r["comms"]:
            for k in c["keys"]:
                m = df[(df.pid == r["pid"]) & (df.comm == c["id"]) & (df.coll == k["coll"]) &
                       (df["bin"] == k["bin"])]
                bad += len(m) != 1 or int(m.calls.iloc[0]) != k["calls"]
    check(bad == 0, f"autoha.reports(): calls match the JSON ({bad} keys differ)")
    check(bool(df.simulated.all()), "autoha.reports(): every row from sim/ is simulated")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
