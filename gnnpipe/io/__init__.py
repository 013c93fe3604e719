"""Everything that touches the filesystem: atomic writes, Parquet and torch artifacts."""

from gnnpipe.io.artifacts import *  # noqa: F401,F403
from gnnpipe.io.atomic import atomic_dir, atomic_path, read_json, write_csv, write_json, write_text  # noqa: F401
