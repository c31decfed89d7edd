"""`python -m ossd sweep GRID [...]`: the sweep driver (`ossd sweep` on the command line runs
this). Other commands are the `ossd` binary's."""

import sys

from .sweeps import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] != "sweep":
        print("usage: python -m ossd sweep GRID [--out DIR] [--ray-address ADDR | --local] [--jobs N]",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(main(args[1:]))
