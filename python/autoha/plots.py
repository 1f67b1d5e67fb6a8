"""`python -m autoha plot` (and `autoha plot`, which runs it): a job's reports drawn with matplotlib
as two PNG files, busbw.png (plot_busbw) and timeline.png (plot_timeline).
"""
import argparse
import os
import sys

from autoha import plot_busbw, plot_timeline
from autoha._optional import MissingDependency
from autoha.report_io import load

def figures(paths, rank=None):
    """Returns [(file name, Figure)] for the reports of `paths` (files or folders), unsaved, so a
    caller (or a test) can inspect them; the timeline shows each communicator as `rank` saw it
    (default: its lowest rank). Raises ValueError when `paths` hold no report, or no report holds
    `rank`."""
    reports = load(paths)
    if not reports:
        raise ValueError(f"autoha: no autoha report in {' '.join(map(str, paths))}")
    ranks = sorted({c["rank"] for r in reports for c in r.get("comms", [])})
    if rank is not None and rank not in ranks:
        raise ValueError(f"autoha plot: --rank {rank}: no report holds rank {rank} (the reports "
                         f"hold ranks {', '.join(map(str, ranks)) or 'none'})")
    return [("busbw.png", plot_busbw.draw(reports)),
            ("timeline.png", plot_timeline.draw(reports, rank=rank))]


def save(figs, out):
    """Writes each (name, Figure) as out/name (PNG, labels kept inside: bbox_inches="tight") and
    returns the paths written; `out` is created when missing."""
    os.makedirs(out, exist_ok=True)
    paths = []
    for name, fig in figs:
        p = os.path.join(out, name)
        fig.savefig(p, dpi=110, bbox_inches="tight")
        paths.append(p)
    return paths


def main(argv):
    """`plot [--out DIR] [--rank R] REPORTS...`: returns the exit status (0, 1 on an error, 2 on bad usage)."""
    ap = argparse.ArgumentParser(
        prog="python -m autoha plot",
        description="Draws a job's reports (files, or folders of *.json) as busbw.png and "
                    "timeline.png with matplotlib.")
    ap.add_argument("-o", "--out", default=".", help="folder to write into (default: .)")
    ap.add_argument("--rank", type=int, default=None,
                    help="the rank whose report gives each communicator's timeline (default: lowest)")
    ap.add_argument("reports", nargs="+", metavar="REPORTS")
    a = ap.parse_args(argv)
    try:
        for p in save(figures(a.reports, a.rank), a.out):
            print(p)
    except (MissingDependency, ValueError, FileNotFoundError) as e:
        print(e, file=sys.stderr)
        return 1
    return 0
