"""DVC entry point of the predict stage; the glue is in gnnpipe/commands/predict.py (`gnnpipe predict --help`)."""

import sys

from gnnpipe.cli import main

if __name__ == "__main__":
    sys.exit(main(["predict", *sys.argv[1:]]))
