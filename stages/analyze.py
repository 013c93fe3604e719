"""DVC entry point of the analyze stage; the glue is in gnnpipe/commands/analyze.py (`gnnpipe analyze --help`)."""

import sys

from gnnpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["analyze", *sys.argv[1:]]))
