"""Feature normalization (``features.normalize``): fitted once by the split stage, applied
identically by every reader of node features (train, baseline, propagate, predict).

INTERFACE STUB (lead, session 24): the helper that owns this module fills it in; the names and
signatures below are the contract other modules code against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FeatureTransform:
    """``kind`` none | row | standardize; ``stats`` the fitted tensors (standardize: ``mean``,
    ``std`` float32 (F,))."""

    kind: str = "none"

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """Rows of features (M, F) -> normalized float32 (M, F); ``none`` returns ``x`` itself."""
        return x


def read_transform(features_dir, node_type: str | None = None) -> FeatureTransform:
    """The fitted transform in ``features_dir`` (data/features), of ``node_type`` on typed graphs.
    STUB: returns the identity until the features helper lands the artifact."""
    return FeatureTransform("none")
