"""`python -m autoha SUBCOMMAND ...`: the `autoha` program's subcommands, from Python.

`lib` prints the library's path; everything else (`run -- CMD ...`, `env`, `report`, `--version`,
...) is the installed program itself, run in place of this process, so `run` merges LD_PRELOAD
exactly as the program does and the exit status is the launched command's.
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
        prog = program_path()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 1
    sys.stdout.flush()
    os.execv(prog, ["autoha"] + args)


if __name__ == "__main__":
    sys.exit(main())
