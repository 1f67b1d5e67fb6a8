"""`python -m autoha SUBCOMMAND ...`: the `autoha` program's subcommands, from Python.

`lib` prints the library's path; `plot [--out DIR] [--rank R] REPORTS...` draws the reports as PNG
with matplotlib (autoha/plots.py; the program's `autoha plot` runs the same, and `plot --trace` is
the program's, which writes the trace and then runs this); everything else (`run -- CMD ...`,
`env`, `report`, `--version`, ...) is the installed program itself, run in place of this process,
so `run` merges LD_PRELOAD exactly as the program does and the exit status is the launched
command's.
"""
import os
import sys

from autoha import library_path, program_path


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    try:
        if args == ["lib"]:
            print(library_path())
            return 0
        if args[:1] == ["plot"] and "--trace" not in args:  # the trace is the program's
            from autoha.plots import main as plot_main
            return plot_main(args[1:])
        prog = program_path()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 1
    sys.stdout.flush()
    os.execv(prog, ["autoha"] + args)


if __name__ == "__main__":
    sys.exit(main())
