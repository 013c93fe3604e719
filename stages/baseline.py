"""DVC entry point of the baseline stage; the glue is in gnnpipe/commands/baseline.py (`gnnpipe baseline --help`)."""

import sys

from gnnpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["baseline", *sys.argv[1:]]))
