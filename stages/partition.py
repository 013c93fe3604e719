"""DVC entry point of the partition stage; the glue is in gnnpipe/commands/partition.py (`gnnpipe partition --help`)."""

import sys

from gnnpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["partition", *sys.argv[1:]]))
