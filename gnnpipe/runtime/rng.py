"""Named, explicit randomness: every stage derives its own stream from the global seed."""

from __future__ import annotations

import zlib

import numpy as np


def make_rng(seed: int, stage: str) -> np.random.Generator:
    """NumPy generator for ``stage``; the same (seed, stage) always gives the same stream."""
    return np.random.default_rng([seed, zlib.crc32(stage.encode())])


def torch_seed(seed: int, stage: str) -> int:
    """An int seed for ``torch.manual_seed`` inside ``torch.random.fork_rng`` for ``stage``."""
    return int(make_rng(seed, stage).integers(0, 2**62))
