"""Reading a job's JSON reports (docs/report.md) from files and folders, and one table of them.

`load` needs only the standard library and gives the reports as parsed; `reports` flattens them into
a pandas DataFrame, one row per (process, communicator, key), for a notebook.
"""
import glob
import json
import os

from autoha._optional import need


def report_files(paths):
    """Returns the report files named by `paths`: a file as given, a folder as every *.json in it
    and its subfolders (as `autoha report --merge` reads one), sorted. Raises FileNotFoundError for
    a path that does not exist."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "**", "*.json"), recursive=True))
        elif os.path.exists(p):
            files.append(p)
        else:
            raise FileNotFoundError(f"autoha: {p}: no such file or folder")
    return files


def load(paths):
    """Returns the reports of `paths` (see report_files) as dicts, each with `_path` added.

    Note that a JSON file that is not an autoha report (no `"tool": "autoha"`, or no `comms`) is
    skipped, so a folder may hold other JSON (a trace, a profile written elsewhere); a file that is
    not JSON at all raises ValueError naming it.
    """
    out = []
    for f in report_files(paths):
        try:
            with open(f, encoding="utf-8") as fh:
                r = json.load(fh)
        except json.JSONDecodeError as e:
            raise ValueError(f"autoha: {f} is not JSON: {e}") from None
        if isinstance(r, dict) and r.get("tool") == "autoha" and isinstance(r.get("comms"), list):
            r["_path"] = f
            out.append(r)
    return out


def is_simulated(report):
    """Returns True when the report was written by a process running on sim/, not real NCCL.

    Note that a report has no flag of its own for sim/: it is told by the GPU model, which sim/'s
    CUDA driver names `ncclsim simulated GPU (...)` (the top level's `topology` field `gpu=` and
    `run.gpu`, docs/report.md). No real driver names a GPU so, and that name is what makes a
    profile from sim/ refused on hardware, so the same field is the sound rule here.
    """
    topo = dict(kv.split("=", 1) for kv in str(report.get("topology", "")).split("; ") if "=" in kv)
    gpus = [topo.get("gpu", ""), str((report.get("run") or {}).get("gpu") or "")]
    return any(g.startswith("ncclsim") for g in gpus)


def key_state(key):
    """Returns the key's tuning state (`converged`, `searching`, `default`) when the search worked
    on it, else the source of its config (`default`, `override`, `profile`)."""
    t = key.get("tuning")
    return t["state"] if t else key.get("source", "default")


def rows(reports):
    """Returns one dict per (report, communicator, key): the columns of `reports()`."""
    out = []
    for r in reports:
        for c in r.get("comms", []):
            for k in c.get("keys", []):
                d, a, b = k.get("default") or {}, k.get("applied") or {}, k.get("bytes") or {}
                out.append({
                    "rank": c.get("rank"), "host": r.get("host"), "pid": r.get("pid"),
                    "comm": c.get("id"), "nranks": c.get("nranks"), "nnodes": c.get("nnodes"),
                    "coll": k.get("coll"), "bin": k.get("bin"),
                    "bytes_min": b.get("bin_min"), "bytes_max": b.get("bin_max"),
                    "calls": k.get("calls"), "source": k.get("source"),
                    "nccl_config": (d.get("config") or {}).get("text"), "nccl_calls": d.get("calls"),
                    "nccl_us": d.get("time_us"), "nccl_busbw_gbs": d.get("busbw_gbs"),
                    "applied_config": (a.get("config") or {}).get("text"),
                    "applied_calls": a.get("calls"), "applied_us": a.get("time_us"),
                    "bytes_mean": a.get("bytes_mean") if a.get("bytes_mean") is not None
                    else d.get("bytes_mean"),
                    "busbw_gbs": a.get("busbw_gbs"), "speedup": k.get("speedup"),
                    "state": key_state(k),
                    "process_rank": r.get("rank"), "job": r.get("job"), "mode": r.get("mode"),
                    "simulated": is_simulated(r), "path": r.get("_path"),
                    "destroyed": bool(c.get("destroyed")),
                })
    return out


def reports(paths):
    """Returns a pandas DataFrame of the reports of `paths` (files or folders), one row per
    (process, communicator, key).

    Columns: `rank` (the process's rank in the communicator), `host`, `pid`, `comm` (hex id),
    `nranks`, `nnodes`, `coll`, `bin`, `bytes_min`/`bytes_max` (the bin's bytes-per-rank range),
    `calls`, `source`, `nccl_config`, `nccl_calls`, `nccl_us` (NCCL's default: mean µs),
    `nccl_busbw_gbs`, `applied_config`, `applied_calls`, `applied_us`, `bytes_mean`, `busbw_gbs`
    (of the applied config), `speedup`, `state` (tuning state, or the source when not searched),
    `process_rank` (the report's lowest rank), `job`, `mode`, `simulated`, `path`, `destroyed`
    (a destroyed communicator the report kept in detail; the summed ones have no keys).
    Note that times and bandwidths are NaN where the report has null (never timed).
    Raises MissingDependency without pandas.
    """
    pd = need("pandas", "autoha.reports()")
    cols = ["rank", "host", "pid", "comm", "nranks", "nnodes", "coll", "bin", "bytes_min",
            "bytes_max", "calls", "source", "nccl_config", "nccl_calls", "nccl_us",
            "nccl_busbw_gbs", "applied_config", "applied_calls", "applied_us", "bytes_mean",
            "busbw_gbs", "speedup", "state", "process_rank", "job", "mode", "simulated", "path",
            "destroyed"]
    df = pd.DataFrame(rows(load(paths)), columns=cols)
    for c in ("nccl_us", "nccl_busbw_gbs", "applied_us", "bytes_mean", "busbw_gbs", "speedup"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    return df
