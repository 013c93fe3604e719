"""The filesystem layer: one module per artifact family, every reader and writer exported here."""

from gnnpipe.io.atomic import atomic_dir, atomic_path, read_json, remove_on_publish, write_csv, write_json, write_text  # noqa: F401
from gnnpipe.io.common import *  # noqa: F401,F403
from gnnpipe.io.description import *  # noqa: F401,F403
from gnnpipe.io.features import *  # noqa: F401,F403
from gnnpipe.io.models import *  # noqa: F401,F403
from gnnpipe.io.partitions import *  # noqa: F401,F403
from gnnpipe.io.predictions import *  # noqa: F401,F403
from gnnpipe.io.prepared import *  # noqa: F401,F403
from gnnpipe.io.propagated import *  # noqa: F401,F403
from gnnpipe.io.splits import *  # noqa: F401,F403
from gnnpipe.io.typed import *  # noqa: F401,F403
