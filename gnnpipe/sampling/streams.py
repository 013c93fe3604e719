"""The reproducible random stream of gnnpipe's samplers: one NumPy generator per sampler, from
its ``seed``, restarted at ``(seed, epoch)`` by ``set_epoch`` and re-derived in every DataLoader
worker (a worker holds a copy of the parent's generator)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch


def sampler_seed(seed: int | torch.Generator | None) -> int:
    """A sampler's stream seed: ``seed`` itself, one draw of a generator, or of torch's RNG."""
    if isinstance(seed, torch.Generator):
        return int(torch.randint(2**62, (), generator=seed))
    return int(torch.randint(2**62, ())) if seed is None else int(seed)


class SeededStream:
    """Mixin: ``seed`` and the stream ``_generator()`` a sampler draws each batch from."""

    def _start_stream(self, seed: int | torch.Generator | None) -> None:
        self.seed = sampler_seed(seed)
        self._rng = np.random.default_rng(self.seed)
        self._rng_worker: Optional[int] = None

    def set_epoch(self, epoch: int) -> None:
        """Restart the stream at ``(seed, epoch)``: epoch e's batches no longer depend on what
        was drawn before, so a run resumed at epoch e samples exactly what it would have."""
        self._rng = np.random.default_rng([self.seed, epoch])
        self._rng_worker = None

    def _generator(self) -> np.random.Generator:
        info = torch.utils.data.get_worker_info()
        if info is not None and self._rng_worker != info.id:
            # A worker holds a copy of the parent's generator: re-derive, or all workers
            # would draw the same stream.
            self._rng = np.random.default_rng([self.seed, info.seed % 2**63])
            self._rng_worker = info.id
        return self._rng
