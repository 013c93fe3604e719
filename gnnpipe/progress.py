"""Progress bars for long loops: shown on a terminal, silent in logs and CI."""

from __future__ import annotations

import os
from typing import Iterable

from tqdm.auto import tqdm


def progress(iterable: Iterable, **kwargs) -> tqdm:
    """``tqdm`` over ``iterable``; off when stderr is not a TTY or GNNPIPE_PROGRESS=0."""
    disable = None if os.environ.get("GNNPIPE_PROGRESS", "1") != "0" else True
    return tqdm(iterable, disable=disable, dynamic_ncols=True, leave=False, **kwargs)
