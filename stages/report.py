"""DVC entry point of the report stage; the glue is in gnnpipe/commands/report.py (`gnnpipe report --help`)."""

import sys

from gnnpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", *sys.argv[1:]]))
