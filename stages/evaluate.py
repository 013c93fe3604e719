"""DVC entry point of the evaluate stage; the glue is in gnnpipe/commands/evaluate.py (`gnnpipe evaluate --help`)."""

import sys

from gnnpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate", *sys.argv[1:]]))
