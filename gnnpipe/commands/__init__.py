"""Stage glue: each module parses paths, loads its params section, calls the library, writes.

Each exposes ``run(args)``, and ``add_arguments(parser)`` where it takes options besides its
paths (its one-line help is in ``gnnpipe.pipeline.HELP``); ``gnnpipe.cli`` turns them into
subcommands, with the paths of the stage table (``gnnpipe/pipeline.py``), and ``stages/<name>.py``
runs one of them for DVC.
"""
