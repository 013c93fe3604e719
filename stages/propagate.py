"""DVC entry point of the propagate stage; the glue is in gnnpipe/commands/propagate.py (`gnnpipe propagate --help`)."""

import sys

from gnnpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["propagate", *sys.argv[1:]]))
