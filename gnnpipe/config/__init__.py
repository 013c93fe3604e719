"""Typed, validated view of ``params.yaml``.

Every top-level section maps 1:1 to a dataclass of ``schema`` (with its bounds); ``samplers``
is the table of every ``train.sampler`` (what it runs, needs and allows) and checks the rules
that depend on it; ``rules`` holds the other cross-field rules; ``loading`` reads YAML into
``Params``, rejecting unknown keys and values of the wrong type or outside the allowed set with a
one-line ``ParamsError`` (a ``ValueError``) that names the dotted key, what was given and what is
allowed, and runs both sets of rules whenever a ``Params`` is built.
"""

from gnnpipe.config.errors import ParamsError
from gnnpipe.config.loading import load_params, params_from_dict, replace, to_dict
from gnnpipe.config.rules import TYPED_LAYERWISE_MODELS
from gnnpipe.config.schema import (
    AnalyzeParams,
    BaselineParams,
    CheckpointParams,
    ClusterParams,
    DatasetParams,
    DistParams,
    EdgeTableParams,
    EvaluateParams,
    FeaturesParams,
    FitParams,
    GbdtParams,
    HgtParams,
    InferenceParams,
    LinkSplitParams,
    NeighborParams,
    NodeSplitParams,
    NodeTableParams,
    Params,
    PartitionParams,
    PredictParams,
    PropagateParams,
    SaintParams,
    ShadowParams,
    SplitParams,
    StorageParams,
    SyntheticParams,
    TemporalParams,
    TrainParams,
    TypedParams,
)

__all__ = [
    "TYPED_LAYERWISE_MODELS", "AnalyzeParams", "BaselineParams",
    "CheckpointParams", "ClusterParams", "DatasetParams", "DistParams", "EdgeTableParams",
    "EvaluateParams", "FeaturesParams", "FitParams", "GbdtParams", "HgtParams", "InferenceParams", "LinkSplitParams",
    "NeighborParams", "NodeSplitParams", "NodeTableParams", "Params", "ParamsError",
    "PartitionParams", "PredictParams", "PropagateParams", "SaintParams", "ShadowParams",
    "SplitParams", "StorageParams", "SyntheticParams", "TemporalParams", "TrainParams",
    "TypedParams", "load_params", "params_from_dict", "replace", "to_dict",
]
