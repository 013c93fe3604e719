"""DVC entry point of the split stage; the glue is in gnnpipe/commands/split.py (`gnnpipe split --help`)."""

import sys

from gnnpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["split", *sys.argv[1:]]))
