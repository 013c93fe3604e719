"""DVC entry point of the train stage; the glue is in gnnpipe/commands/train.py (`gnnpipe train --help`)."""

import sys

from gnnpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
