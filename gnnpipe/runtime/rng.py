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


MIX_MULTIPLIERS = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def mix(seed: int, step: int, ids: np.ndarray) -> np.ndarray:
    """splitmix64 of (seed, step, id): uint64 (n,), the same in every process. For a fixed
    (seed, step) a bijection of uint64 (an added constant, then invertible xorshift-multiplies),
    so distinct ids never share a value."""
    m1, m2 = MIX_MULTIPLIERS
    with np.errstate(over="ignore"):
        z = (ids.astype(np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15
                                                + step * 0xD1B54A32D192ED03) % 2**64))
        z = (z ^ (z >> np.uint64(30))) * m1
        z = (z ^ (z >> np.uint64(27))) * m2
        return z ^ (z >> np.uint64(31))
