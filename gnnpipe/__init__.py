"""gnnpipe: a reproducible, cached pipeline for training GNNs on large graphs."""

__version__ = "0.1.0"
