"""autoha: libautoha.so, an LD_PRELOAD tuner for NCCL collectives, and its command line.

The wheel holds the library and the `autoha` program inside this package (autoha/lib,
autoha/bin), built by CMake through scikit-build-core; this module finds them, and `reports(dir)`
reads a job's JSON reports into a pandas DataFrame (pandas and matplotlib, for `python -m autoha
plot`, are the optional `plot` extra: `pip install 'autoha[plot]'`).
"""
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def library_path():
    """Returns the absolute path of the installed libautoha.so (to put on LD_PRELOAD)."""
    return _find(os.path.join("lib", "libautoha.so"))


def program_path():
    """Returns the absolute path of the installed `autoha` program."""
    return _find(os.path.join("bin", "autoha"))


def _find(rel):
    path = os.path.join(_HERE, rel)
    if not os.path.exists(path):
        raise FileNotFoundError(f"autoha: {path} is missing: the autoha package is not fully installed")
    return path


def reports(paths):
    """Returns a pandas DataFrame of the reports in `paths` (a folder, a file, or a list of them),
    one row per (process, communicator, key): autoha.report_io.reports says which columns."""
    from autoha.report_io import reports as _reports
    return _reports(paths)
