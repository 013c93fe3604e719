"""Stage glue: each module parses paths, loads its params section, calls the library, writes.

Each exposes ``HELP``, ``add_arguments(parser)`` and ``run(args)``; ``gnnpipe.cli`` turns them
into subcommands and ``stages/<name>.py`` runs one of them for DVC.
"""

STAGES = ("prepare", "split", "analyze", "partition", "propagate", "baseline", "train",
          "predict", "evaluate", "report")
