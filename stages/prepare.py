"""DVC entry point of the prepare stage; the glue is in gnnpipe/commands/prepare.py (`gnnpipe prepare --help`)."""

import sys

from gnnpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["prepare", *sys.argv[1:]]))
