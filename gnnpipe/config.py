"""Typed, validated view of ``params.yaml``.

Every top-level section maps 1:1 to a dataclass below. ``load_params`` rejects unknown keys and
values of the wrong type or outside the allowed set with a ``ParamsError`` (a ``ValueError``) that
names the dotted key, what was given and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

DEFAULT_PARAMS = "params.yaml"


class ParamsError(ValueError):
    """A params.yaml key is unknown, missing or has a bad value."""


def _check(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           high_open: bool = False) -> dict:
    """Field metadata describing the numeric range a value must lie in."""
    return {"low": low, "high": high, "low_open": low_open, "high_open": high_open}


def num(default: Any, **bounds: Any) -> Any:
    return field(default=default, metadata=_check(**bounds))


# ----------------------------------------------------------------------------------- sections
@dataclass(frozen=True)
class SyntheticParams:
    """Contextual degree-corrected SBM: class-correlated features and tunable homophily."""

    num_nodes: int = num(20_000, low=2)  # nodes (papers when hetero)
    num_classes: int = num(5, low=2)  # label classes
    num_features: int = num(64, low=1)  # feature width
    avg_degree: float = num(10.0, low=0.0, low_open=True)  # mean degree before dedup
    homophily: float = num(0.8, low=0.0, high=1.0)  # fraction of edges inside a class
    degree_skew: float = num(1.0, low=0.0)  # sigma of log-normal degree propensities; 0 = uniform
    feature_signal: float = num(1.0, low=0.0)  # norm of class-mean offsets vs unit noise
    class_imbalance: float = num(0.0, low=0.0)  # class c has weight (c + 1) ** -imbalance; 0 = balanced
    timestamps: bool = False  # also draw a node timestamp (uniform in [0, 1)) for time splits
    # share of nodes that keep their label (drawn per class, seeded); the rest are unlabelled:
    # they carry messages but are in no split. 1.0 = every node labelled (the default graph)
    label_rate: float = num(1.0, low=0.0, high=1.0, low_open=True)
    # hetero: papers (num_nodes, the labelled type) / authors / venues instead (gnnpipe/hetero)
    hetero: bool = False
    num_authors: int = num(5_000, low=1)  # hetero only
    num_venues: int = num(20, low=1)  # hetero only; venue v has class v mod num_classes
    authors_per_paper: float = num(3.0, low=0.0, low_open=True)  # hetero only: writes per paper


@dataclass(frozen=True)
class NodeTableParams:
    """The node table of ``dataset.source: parquet | csv`` (one row per node)."""

    file: str = ""  # relative to dataset.path; "" = nodes.parquet / nodes.csv (typed: nodes/)
    id: str = "id"  # any unique integer or string id; remapped to 0..N-1 in file order
    # one list/array column, or comma-separated scalar columns / globs ("f0,f1" or "feat_*")
    features: str = "x"
    label: str = "label"  # integer or string classes, remapped to dense codes 0..C-1
    timestamp: str = ""  # optional column kept in node_ids.parquet; "" = none
    # label values that mean "unlabelled" besides null / NaN / blank / nan / NA / N/A / None /
    # null (those always do), e.g. [-1]
    unlabeled_values: tuple[Union[int, str], ...] = field(default=(),
                                                           metadata={"empty_ok": True})


@dataclass(frozen=True)
class EdgeTableParams:
    """The edge table of ``dataset.source: parquet | csv`` (one row per edge, read in chunks)."""

    file: str = ""  # relative to dataset.path; "" = edges.parquet / edges.csv (typed: edges/)
    src: str = "src"  # source node id column
    dst: str = "dst"  # destination node id column
    weight: str = ""  # optional numeric column kept in edge_attrs.parquet; "" = none
    timestamp: str = ""  # optional; merged duplicates keep their earliest row


@dataclass(frozen=True)
class StorageParams:
    """How prepare stores the graph: bytes on disk against precision (BENCHMARKS.md, sizes)."""

    # graph.pt features; float16/bfloat16 halve x on disk, readers compute in float32
    feature_dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    compression: Literal["zstd", "snappy", "lz4", "gzip", "none"] = "zstd"  # prepare's Parquet
    # x in graph.pt (inline) or in features.npy, streamed by prepare and read row by row (external;
    # auto: external from 1 GiB of stored features); docs/scaling.md
    features: Literal["inline", "external", "auto"] = "inline"


@dataclass(frozen=True)
class TypedParams:
    """``dataset.layout: typed`` (docs/typed-graphs.md): which node type is labelled, which
    relation link prediction holds out, and what featureless node types get."""

    target: str = ""  # the labelled node type; "" = the one node table with the label column
    # src__rel__dst held out for dataset.task: link; "" = the first relation (file name order)
    # with the target type at one end, else the first relation
    link_edge_type: str = ""
    # node types without feature columns: degree = log1p(in-degree) per incoming edge type,
    # constant = one column of ones
    featureless: Literal["degree", "constant"] = "degree"


@dataclass(frozen=True)
class DatasetParams:
    source: Literal["synthetic", "parquet", "csv", "planetoid", "ogb", "pyg"] = "synthetic"
    # Input of prepare, also a DVC dependency of the stage (dvc.yaml lists ${dataset.path}), so
    # it must exist: data/raw (committed, holding a README) is the place for your own files.
    path: str = "data/raw"
    name: str = ""  # planetoid: Cora | CiteSeer | PubMed; ogb: folder under path (ogbn-arxiv)
    nodes: NodeTableParams = field(default_factory=NodeTableParams)
    edges: EdgeTableParams = field(default_factory=EdgeTableParams)
    task: Literal["node", "link"] = "node"  # node classification | link prediction
    undirected: bool = True  # store both directions of every edge
    dedup: bool = True  # drop repeated (src, dst) pairs; the count is reported
    self_loops: Literal["remove", "keep"] = "remove"
    synthetic: SyntheticParams = field(default_factory=SyntheticParams)
    storage: StorageParams = field(default_factory=StorageParams)
    # parquet / csv / ogb: typed = one table per node type and per relation
    # (docs/typed-graphs.md); synthetic: dataset.synthetic.hetero picks the typed built-in graph
    layout: Literal["homogeneous", "typed"] = "homogeneous"
    typed: TypedParams = field(default_factory=TypedParams)
    max_classes: int = num(1000, low=2)  # more distinct label values than this is refused

    @property
    def graph_kind(self) -> str:
        """``typed`` or ``homogeneous``: what prepare will write (the one place it is decided
        from params; later stages read it from the artifacts)."""
        if self.source == "synthetic":
            return "typed" if self.synthetic.hetero else "homogeneous"
        return self.layout


@dataclass(frozen=True)
class NodeSplitParams:
    # public: the dataset's official split (planetoid, ogb, pyg masks); sizes are then ignored
    strategy: Literal["random", "stratified", "cluster", "time", "public"] = "stratified"
    # Per-phase message graphs (gnnpipe/split.py). auto: time for strategy time, else
    # transductive. time: each phase sees its own and earlier splits plus unlabelled nodes no
    # later than its cut (train: the latest train timestamp). transductive with strategy time is
    # an explicit opt-in to training on edges into the future (the audit then only warns).
    mode: Literal["auto", "transductive", "inductive", "time"] = "auto"
    # A float in (0, 1) is a fraction of all nodes; an int >= 1 is a count (per class if per_class).
    train: Union[int, float] = num(0.6, low=0.0, low_open=True)
    val: Union[int, float] = num(0.2, low=0.0, low_open=True)  # as train
    test: Union[int, float] = num(0.2, low=0.0, low_open=True)  # as train
    per_class: bool = False  # train size counted per class ("20 per class")
    # strategy=cluster: whole clusters go to one split, so few edges join train and test nodes.
    cluster: Literal["metis", "component"] = "metis"
    num_clusters: int = num(32, low=2)  # metis parts (cluster=metis only)

    def __post_init__(self) -> None:
        # Resolved here so every reader (split, hetero split, audit, meta) sees a concrete mode,
        # and the default graph's params (mode: transductive) hash as before.
        if self.mode == "auto":
            object.__setattr__(self, "mode", "time" if self.strategy == "time" else "transductive")

    @property
    def future_visible(self) -> bool:
        """True when the user chose ``mode: transductive`` for a time split (auto never
        resolves to it): training may see later nodes, and the audit warns instead of failing."""
        return self.strategy == "time" and self.mode == "transductive"


@dataclass(frozen=True)
class LinkSplitParams:
    """Edge hold-out for ``dataset.task: link`` (see gnnpipe/link_split.py)."""

    # A float in (0, 1) is a fraction of the graph's edges (undirected pairs); an int a count.
    val: Union[int, float] = num(0.1, low=0.0, low_open=True)
    test: Union[int, float] = num(0.1, low=0.0, low_open=True)  # as val
    # Share of training edges used only as supervision, never for message passing (PyG's
    # RandomLinkSplit disjoint_train_ratio); 0 = every training edge does both.
    disjoint_train_ratio: float = num(0.0, low=0.0, high=1.0, high_open=True)
    num_val_negatives: int = num(100, low=1)  # fixed negatives per val positive
    num_test_negatives: int = num(100, low=1)  # fixed negatives per test positive
    negative_strategy: Literal["uniform", "degree"] = "uniform"  # degree: hard, degree-matched


@dataclass(frozen=True)
class SplitParams:
    node: NodeSplitParams = field(default_factory=NodeSplitParams)
    link: LinkSplitParams = field(default_factory=LinkSplitParams)


@dataclass(frozen=True)
class PartitionParams:
    # metis: min-cut k-way; random / bfs (contiguous chunks of a BFS order): cheap baselines
    method: Literal["metis", "random", "bfs"] = "metis"
    # metis only. auto: pyg_lib or torch_sparse METIS when importable (and built with METIS),
    # else pymetis (a dependency, bundles METIS)
    backend: Literal["auto", "pymetis", "torch_sparse", "pyg_lib"] = "auto"
    num_parts: int = num(8, low=1)  # parts (and shards) of the train-phase graph
    # none: balance node counts; degree: balance 1 + in-degree (aggregation work) [metis, bfs]
    node_weight: Literal["none", "degree"] = "none"
    # multiplicity: an edge weighs the number of stored directed edges it stands for [metis]
    edge_weight: Literal["none", "multiplicity"] = "none"
    imbalance: float = num(0.03, low=0.001, high=1.0)  # METIS tolerance (pymetis ufactor/1000)
    halo_hops: int = num(1, low=0)  # k-hop in-neighbourhood stored with each part shard


@dataclass(frozen=True)
class PropagateParams:
    hops: int = num(2, low=0)
    # sym: D^-1/2 A D^-1/2; rw: D^-1 A; ppr: APPNP power iteration on sym,
    # X_k = (1 - alpha) A_hat X_{k-1} + alpha X_0
    norm: Literal["sym", "rw", "ppr"] = "sym"
    self_loops: bool = True  # add I to A before normalizing
    alpha: float = num(0.1, low=0.0, high=1.0, low_open=True, high_open=True)  # ppr teleport
    dtype: Literal["float32", "bfloat16"] = "float32"  # stored hops; always computed in float32
    block_rows: int = num(65_536, low=1)  # rows of X processed at once; bounds peak memory
    # product kernel: aten torch.sparse.mm; jit numba with prefetch (bit-identical); auto: jit
    # when numba imports and a hop gathers >= propagate.AUTO_JIT_GATHERED_BYTES
    kernel: Literal["auto", "aten", "jit"] = "auto"


@dataclass(frozen=True)
class BaselineParams:
    """The structure-free MLP trained on the same split as the GNN."""

    hidden: int = num(64, low=1)  # hidden channels
    num_layers: int = num(2, low=1)  # layers (message-passing layers for a GNN)
    dropout: float = num(0.5, low=0.0, high=1.0, high_open=True)  # between layers
    lr: float = num(0.01, low=0.0, low_open=True)  # Adam learning rate
    weight_decay: float = num(0.0005, low=0.0)  # Adam weight decay
    epochs: int = num(200, low=1)  # at most; early stopping may end sooner
    patience: int = num(50, low=1)  # epochs without val improvement before stopping


@dataclass(frozen=True)
class InferenceParams:
    """Evaluation forward (gnnpipe/inference.py): the whole graph at once, or layer by layer over
    blocks of target nodes (peak memory ~ N x hidden x 2 + block edges x width)."""

    # auto: layerwise once num_edges x max(in_dim, hidden) passes inference.AUTO_MESSAGE_FLOATS
    mode: Literal["full", "layerwise", "auto"] = "auto"
    block_edges: int = num(2_000_000, low=1, high=2**31 - 1)  # edges + rows per block


@dataclass(frozen=True)
class NeighborParams:
    """Neighbor sampling (gnnpipe/sampling): samplers neighbor and link_neighbor."""

    num_neighbors: tuple[int, ...] = num((15, 10), low=-1)  # one fan-out per layer, -1 = all
    replace: bool = False  # draw neighbours with replacement (also the shadow sampler's)
    subgraph_type: Literal["directional", "bidirectional", "induced"] = "directional"
    disjoint: bool = False  # one sampled tree per seed node
    # neighbor: draw in-edges in proportion to the edge table's dataset.edges.weight column
    weighted: bool = False


@dataclass(frozen=True)
class TemporalParams:
    """Temporal sampling (neighbor, shadow; gnnpipe/sampling/temporal.py): a seed's tree takes
    only edges no later than the seed's node timestamp."""

    # edge: by the edge's timestamp (dataset.edges.timestamp), node: by the neighbour's node
    # timestamp
    by: Literal["none", "node", "edge"] = "none"
    strategy: Literal["uniform", "last"] = "uniform"  # last: the most recent allowed edges


@dataclass(frozen=True)
class ShadowParams:
    """ShaDow k-hop subgraphs (gnnpipe/sampling/shadow.py): each seed's subgraph is induced on a
    sampled ``depth``-hop neighbourhood; the depth need not be num_layers."""

    depth: int = num(2, low=1)
    num_neighbors: int = num(10, low=-1)  # in-edges per node and hop, -1 = all
    # roots_first: roots are nodes 0..B-1 of a Data; pyg: PyG's ShaDowKHopSampler Batch (ptr,
    # sorted batch, root_n_id inside each subgraph, y of the roots only)
    layout: Literal["roots_first", "pyg"] = "roots_first"


@dataclass(frozen=True)
class HgtParams:
    """HGT per-type node budgets (heterogeneous graphs; gnnpipe/sampling/hetero.py)."""

    # nodes sampled per node type and hop (one per num_layers), HGTLoader's num_samples
    num_samples: tuple[int, ...] = num((512, 512), low=0)


@dataclass(frozen=True)
class ClusterParams:
    """ClusterGCN batches of data/partition parts (gnnpipe/sampling/cluster.py)."""

    parts_per_batch: int = num(2, low=1)  # parts joined per batch, edges between them restored
    # also the in-edges from outside the batch's parts, their sources appended as non-loss nodes
    keep_inter_cluster_edges: bool = False


@dataclass(frozen=True)
class SaintParams:
    """GraphSAINT subgraphs (gnnpipe/sampling/saint.py); train.batch_size = walk roots
    (random_walk), nodes drawn (node) or edges drawn (edge) per subgraph."""

    # random_walk: walks from batch_size train roots; node: batch_size nodes ~ out-degree;
    # edge: both ends of batch_size edges ~ 1/deg(u) + 1/deg(v) (PyG's three samplers)
    sampler: Literal["random_walk", "node", "edge"] = "random_walk"
    walk_length: int = num(2, low=1)  # steps of each walk from its root (random_walk)
    num_steps: int = num(0, low=0)  # subgraphs per epoch (all ranks); 0 = ceil(train / batch_size)
    sample_coverage: int = num(20, low=1)  # pre-sampled subgraphs hold this many nodes per node


@dataclass(frozen=True)
class DistParams:
    """DDP through torchrun (gnnpipe/distributed.py): processes per machine and machines, and
    the bounds on every wait (docs/scaling.md)."""

    nproc: int = num(1, low=1)
    nnodes: int = num(1, low=1)
    node_rank: int = num(0, low=0)  # this machine's index when nnodes > 1
    rdzv_endpoint: str = ""  # host:port of machine 0 when nnodes > 1 (it hosts the rendezvous)
    timeout_s: float = num(300.0, low=0.0, low_open=True)  # bound on forming the group, collectives
    # bound on the rendezvous: every machine joins and the endpoint answers within it, else the
    # stage fails with one line (hard stop after this + distributed.START_GRACE_S)
    rdzv_timeout_s: float = num(300.0, low=1.0)
    # refuse ranks x DataLoader workers whose memory floor (gnnpipe/capacity.py) passes what the
    # machine has available; false = launch anyway
    check_resources: bool = True
    # partition: each DDP rank loads only its data/partition shards (+halo); needs sampler cluster
    shard: Literal["none", "partition"] = "none"

    @property
    def world_size(self) -> int:
        """Processes of the whole job: nproc x nnodes."""
        return self.nproc * self.nnodes


@dataclass(frozen=True)
class CheckpointParams:
    """Checkpoints (data/checkpoint/train.pt, not a DVC output)."""

    every: int = num(10, low=0)  # epochs between checkpoints, 0 = never
    resume: bool = True  # continue a killed run from its checkpoint (same params and inputs)


@dataclass(frozen=True)
class TrainParams(BaselineParams):
    # hgt / rgcn: heterogeneous graphs only (sage is then to_hetero(GraphSAGE); gnnpipe/hetero)
    model: Literal["mlp", "gcn", "sage", "gat", "sign", "hgt", "rgcn"] = "sage"
    # link_neighbor (dataset.task link, gnnpipe/sampling/link.py): batch_size supervision edges
    # per step, each with one negative, sampled with the neighbor options
    # shadow: ShaDow k-hop subgraphs, one per seed, loss at its root (gnnpipe/sampling/shadow.py)
    # hgt: HGT per-type node budgets (heterogeneous graphs; gnnpipe/sampling/hetero.py)
    sampler: Literal["full", "sign", "neighbor", "cluster", "saint", "link_neighbor",
                     "shadow", "hgt"] = "full"
    jk: Literal["none", "cat", "max"] = "none"  # jumping knowledge over layer outputs
    # skip connections h + layer(h) between hidden layers of equal width (gcn, sage, gat)
    residual: bool = False
    heads: int = num(4, low=1)  # attention heads (gat, hgt)
    batch_size: int = num(1024, low=1)  # rows (sign), seeds (neighbor), walk roots (saint) per step
    num_workers: int = num(0, low=0)  # DataLoader worker processes sampling batches
    amp: bool = False  # autocast: bfloat16 on CPU, float16 with a GradScaler on CUDA
    # where the train stage runs (gnnpipe/device.py): auto = cuda when torch sees a CUDA device,
    # else cpu; cuda without one is refused at the start of the stage
    device: Literal["auto", "cpu", "cuda"] = "auto"
    compile: bool = False  # torch.compile(model, dynamic=True); fails loudly if it cannot
    # who runs the loop: gnnpipe.train.fit, or a Lightning Trainer (gnnpipe/lightning.py)
    engine: Literal["plain", "lightning"] = "plain"
    # message passing of gcn / sage: scatter (per-edge messages), csr (sparse CSR product over
    # target rows), auto (the faster of the two, timed on the first training batch)
    aggregation: Literal["scatter", "csr", "auto"] = "scatter"
    inference: InferenceParams = field(default_factory=InferenceParams)
    neighbor: NeighborParams = field(default_factory=NeighborParams)
    temporal: TemporalParams = field(default_factory=TemporalParams)
    shadow: ShadowParams = field(default_factory=ShadowParams)
    hgt: HgtParams = field(default_factory=HgtParams)
    cluster: ClusterParams = field(default_factory=ClusterParams)
    saint: SaintParams = field(default_factory=SaintParams)
    dist: DistParams = field(default_factory=DistParams)
    checkpoint: CheckpointParams = field(default_factory=CheckpointParams)
    # intra-op threads of the train stage (each DDP rank): inherit the top-level threads, or
    # auto | a count (gnnpipe/threads.py)
    threads: Union[Literal["auto", "inherit"], int] = num("inherit", low=1)


# Keys of the flat train section of old params files -> where they live now
MOVED = {
    "train.inference": "train.inference.mode",
    "train.inference_block_edges": "train.inference.block_edges",
    **{f"train.{k}": f"train.neighbor.{k}"
       for k in ("num_neighbors", "replace", "subgraph_type", "disjoint")},
    "train.temporal": "train.temporal.by",
    "train.temporal_strategy": "train.temporal.strategy",
    "train.shadow_depth": "train.shadow.depth",
    "train.shadow_num_neighbors": "train.shadow.num_neighbors",
    "train.num_samples": "train.hgt.num_samples",
    "train.parts_per_batch": "train.cluster.parts_per_batch",
    **{f"train.{k}": f"train.saint.{k}" for k in ("walk_length", "num_steps", "sample_coverage")},
    **{f"train.{k}": f"train.dist.{k}" for k in ("nproc", "nnodes", "node_rank", "rdzv_endpoint",
                                                  "shard")},
    "train.dist_timeout_s": "train.dist.timeout_s",
    "train.checkpoint_every": "train.checkpoint.every",
    "train.resume": "train.checkpoint.resume",
}


@dataclass(frozen=True)
class AnalyzeParams:
    """Thresholds of the graph diagnostics' warnings (metrics/graph.json)."""

    low_homophily: float = num(0.2, low=-1.0, high=1.0)  # adjusted homophily below this: warn
    max_isolated_fraction: float = num(0.1, low=0.0, high=1.0)  # more isolated nodes: warn


@dataclass(frozen=True)
class EvaluateParams:
    min_gain: float = num(0.01, low=0.0)  # gnn_minus_mlp accuracy below this: "graph adds nothing"
    hits_k: tuple[int, ...] = num((10, 50), low=1)  # link task: Hits@K for each K


@dataclass(frozen=True)
class FeaturesParams:
    """How node features are normalized before every model reads them (gnnpipe/features.py)."""

    # row: PyG NormalizeFeatures (each row divided by its sum); standardize: per column, mean
    # and std of the train nodes only (the split stage fits them: data/features)
    normalize: Literal["none", "row", "standardize"] = "none"


@dataclass(frozen=True)
class PredictParams:
    """The predict stage: every node's prediction and embedding (data/predict)."""

    top_k: int = num(3, low=1)  # class probabilities kept per node (capped at the classes)
    embedding_dtype: Literal["float32", "float16"] = "float32"  # embeddings.parquet values
    pairs: str = ""  # link task: a Parquet/CSV of candidate (src, dst) user id pairs to score
    block_rows: int = num(65_536, low=1)  # rows per Parquet row group written


@dataclass(frozen=True)
class Params:
    # the global seed; each stage draws its own stream from (seed, stage name)
    seed: int = num(0, low=0, high=2**63 - 1)  # torch.manual_seed takes [0, 2^63)
    dataset: DatasetParams = field(default_factory=DatasetParams)
    split: SplitParams = field(default_factory=SplitParams)
    analyze: AnalyzeParams = field(default_factory=AnalyzeParams)
    partition: PartitionParams = field(default_factory=PartitionParams)
    propagate: PropagateParams = field(default_factory=PropagateParams)
    train: TrainParams = field(default_factory=TrainParams)
    baseline: BaselineParams = field(default_factory=BaselineParams)
    evaluate: EvaluateParams = field(default_factory=EvaluateParams)
    features: FeaturesParams = field(default_factory=FeaturesParams)
    predict: PredictParams = field(default_factory=PredictParams)
    # intra-op threads of every stage process: auto (cores available / DDP ranks on the
    # machine, gnnpipe/threads.py) or a count; outputs are byte-identical per thread count
    threads: Union[Literal["auto"], int] = num("auto", low=1)

    def __post_init__(self) -> None:
        for rule in RULES:  # the one place cross-field rules run, in this order
            rule(self)


# ------------------------------------------------------------------------- cross-field rules
# Each rule takes the whole Params and raises a one-line ParamsError; RULES runs them at load
# time. Rules that need the data (graph sizes, split meta) stay where the data is read.
HETERO_MODELS = ("sage", "hgt", "rgcn", "mlp")  # sage = to_hetero(GraphSAGE)
TYPED_NODE_SAMPLERS = ("full", "hgt", "neighbor")  # hgt: per-type node budgets
TYPED_LINK_SAMPLERS = ("full", "link_neighbor")  # link_neighbor: typed supervision batches
HETERO_SAMPLERS = TYPED_NODE_SAMPLERS + TYPED_LINK_SAMPLERS[1:]
TYPED_DDP_SAMPLERS = {"node": "neighbor", "link": "link_neighbor"}  # seeds split across ranks
TYPED_LAYERWISE_MODELS = ("sage", "rgcn")  # typed models gnnpipe/inference.py blocks
LINK_SAMPLERS = ("full", "sign", "link_neighbor")
LIGHTNING_SAMPLERS = ("full", "neighbor")
LIGHTNING_MODELS = ("mlp", "gcn", "sage", "gat")


def _check_sign(params: Params) -> None:
    """train.model=sign and train.sampler=sign go together (precomputed features)."""
    model, sampler = params.train.model, params.train.sampler
    if (model == "sign") != (sampler == "sign"):
        raise ParamsError(
            f"train.model={model!r} with train.sampler={sampler!r}: the sign model trains on "
            "precomputed features, so use train.model=sign together with train.sampler=sign")


TYPED_SOURCES = ("parquet", "csv", "ogb")  # dataset.layout: typed readers


def _check_typed_source(params: Params) -> None:
    """Typed graphs come from the built-in generator or from typed tables / OGB-MAG folders."""
    dataset = params.dataset
    source = dataset.source
    if dataset.synthetic.hetero and source != "synthetic":
        raise ParamsError(f"dataset.synthetic.hetero=true generates the built-in heterogeneous "
                          f"graph and needs dataset.source=synthetic (found {source!r}); for "
                          "your own typed tables use dataset.layout: typed")
    if dataset.layout == "typed" and source not in TYPED_SOURCES:
        hint = (" (the built-in typed graph is dataset.synthetic.hetero: true)"
                if source == "synthetic" else "")
        raise ParamsError(f"dataset.layout='typed' reads typed tables and needs dataset.source "
                          f"{' | '.join(TYPED_SOURCES)}, not {source!r}{hint}")
    if dataset.layout == "typed" and dataset.edges.weight:
        raise ParamsError(f"dataset.edges.weight={dataset.edges.weight!r} is not supported with "
                          "dataset.layout='typed' (typed graphs keep no edge weights); set it "
                          "to \"\"")


def _check_typed_needs_hetero(params: Params) -> None:
    """hgt / rgcn and the hgt sampler work on heterogeneous graphs only."""
    cfg, hetero = params.train, params.dataset.graph_kind == "typed"
    if cfg.model in ("hgt", "rgcn") and not hetero:
        raise ParamsError(
            f"train.model={cfg.model!r} needs a heterogeneous graph (dataset.layout: typed or "
            "dataset.synthetic.hetero: true); for a homogeneous graph use mlp, gcn, sage, gat "
            "or sign")
    if cfg.sampler == "hgt" and not hetero:
        raise ParamsError("train.sampler='hgt' samples typed node budgets and needs a "
                          "heterogeneous graph (dataset.layout: typed or "
                          "dataset.synthetic.hetero: true)")


def _check_hgt_budgets(params: Params) -> None:
    """train.sampler=hgt: one node budget per layer."""
    cfg = params.train
    samples = cfg.hgt.num_samples
    if cfg.sampler == "hgt" and len(samples) != cfg.num_layers:
        raise ParamsError(
            f"train.hgt.num_samples={list(samples)} has {len(samples)} hops but "
            f"train.num_layers={cfg.num_layers}: give one node budget per layer")


def _check_typed_train(params: Params) -> None:
    """What the heterogeneous train stage (gnnpipe/commands/train.py, train_typed_*) runs."""
    cfg, task = params.train, params.dataset.task
    if params.dataset.graph_kind != "typed":
        return
    if cfg.model not in HETERO_MODELS:
        raise ParamsError(
            f"train.model={cfg.model!r} is not available for heterogeneous graphs "
            "(typed graphs); use sage (to_hetero), hgt, rgcn or mlp")
    allowed = TYPED_NODE_SAMPLERS if task == "node" else TYPED_LINK_SAMPLERS
    if cfg.sampler not in allowed:
        raise ParamsError(f"train.sampler={cfg.sampler!r} is not available for heterogeneous "
                          f"graphs with dataset.task={task} yet; use one of: {', '.join(allowed)}")
    if cfg.dist.world_size > 1 and cfg.sampler != TYPED_DDP_SAMPLERS[task]:
        raise ParamsError(f"train.dist.nproc/train.dist.nnodes > 1 on heterogeneous graphs with "
                          f"dataset.task={task} needs train.sampler={TYPED_DDP_SAMPLERS[task]} "
                          f"(found {cfg.sampler!r}): only its seeds are split across ranks")
    if cfg.compile or cfg.residual:
        raise ParamsError("train.compile / train.residual are not supported for heterogeneous "
                          "graphs yet; set them to false")


def _check_heads(params: Params) -> None:
    """gat and hgt split train.hidden channels across train.heads."""
    cfg = params.train
    if cfg.model in ("gat", "hgt") and cfg.hidden % cfg.heads:
        raise ParamsError(
            f"train.hidden={cfg.hidden} must be divisible by train.heads={cfg.heads} for "
            f"{cfg.model} (each head gets hidden / heads channels)")


def _check_task_sampler(params: Params) -> None:
    """Seed-node samplers for dataset.task=node, supervision-edge ones for link."""
    sampler, task = params.train.sampler, params.dataset.task
    if sampler == "link_neighbor" and task != "link":
        raise ParamsError(
            f"train.sampler='link_neighbor' samples around supervision edges and needs "
            f"dataset.task=link (found {task!r}); for node classification use "
            "train.sampler=neighbor")
    if sampler in ("neighbor", "shadow") and task == "link":
        raise ParamsError(
            f"train.sampler={sampler!r} samples around labelled seed nodes "
            "(dataset.task=node); for dataset.task=link use train.sampler=link_neighbor")
    if task == "link" and sampler not in LINK_SAMPLERS:
        raise ParamsError(f"train.sampler={sampler!r} is not available for dataset.task=link; "
                          f"use one of: {', '.join(LINK_SAMPLERS)}")


def _check_fanouts(params: Params) -> None:
    """The neighbor samplers draw one fan-out per layer."""
    cfg = params.train
    hops, layers = len(cfg.neighbor.num_neighbors), cfg.num_layers
    if cfg.sampler in ("neighbor", "link_neighbor") and hops != layers:
        raise ParamsError(
            f"train.neighbor.num_neighbors={list(cfg.neighbor.num_neighbors)} has {hops} hops "
            f"but train.num_layers={layers}: give one fan-out per layer")


def _check_temporal(params: Params) -> None:
    """Temporal sampling draws seed neighbourhoods (neighbor, shadow)."""
    by, sampler = params.train.temporal.by, params.train.sampler
    if by != "none" and sampler not in ("neighbor", "shadow"):
        raise ParamsError(
            f"train.temporal.by={by!r} with train.sampler={sampler!r}: temporal sampling draws "
            "seed neighbourhoods, so use train.sampler=neighbor or shadow (or "
            "train.temporal.by: none)")


def _check_weighted(params: Params) -> None:
    """Weighted neighbor sampling reads dataset.edges.weight; pyg-lib has no weighted temporal."""
    cfg, column = params.train, params.dataset.edges.weight
    if not cfg.neighbor.weighted:
        return
    if cfg.sampler != "neighbor" or not column or cfg.temporal.by != "none":
        raise ParamsError(
            f"train.neighbor.weighted=true draws in-edges in proportion to the edge table's "
            f"weight column: it needs train.sampler=neighbor (found {cfg.sampler!r}), "
            f"dataset.edges.weight set (found {column!r}) and train.temporal.by=none (found "
            f"{cfg.temporal.by!r}); or set train.neighbor.weighted: false")


def _check_shard(params: Params) -> None:
    """A rank holding only its partition shards trains on ClusterGCN batches."""
    sampler = params.train.sampler
    if params.train.dist.shard == "partition" and sampler != "cluster":
        raise ParamsError(
            f"train.dist.shard='partition' with train.sampler={sampler!r}: a rank holding only "
            "its partition shards trains on ClusterGCN batches, so use train.sampler=cluster")


def _check_link_processes(params: Params) -> None:
    """Link prediction on several processes splits supervision-edge batches (link_neighbor)."""
    cfg = params.train
    if params.dataset.task == "link" and cfg.dist.world_size > 1 and (
            cfg.sampler != "link_neighbor"):
        raise ParamsError(f"train.dist.nproc/train.dist.nnodes > 1 with dataset.task=link needs "
                          f"train.sampler=link_neighbor (found {cfg.sampler!r}): the full-graph "
                          "step has no batches to split across ranks")


def _check_rendezvous(params: Params) -> None:
    """Several machines meet at train.dist.rdzv_endpoint (torchrun's c10d rendezvous)."""
    dist = params.train.dist
    if dist.nnodes > 1 and not dist.rdzv_endpoint:
        raise ParamsError(f"train.dist.nnodes={dist.nnodes} needs train.dist.rdzv_endpoint "
                          "(host:port of the first machine)")
    if dist.node_rank >= dist.nnodes:  # torchrun would wait for a machine that cannot exist
        raise ParamsError(f"train.dist.node_rank={dist.node_rank} is out of range for "
                          f"train.dist.nnodes={dist.nnodes}; expected 0 .. {dist.nnodes - 1}")


def _check_residual(params: Params) -> None:
    """train.residual needs a graph model with at least one hidden-to-hidden layer."""
    train = params.train
    if not train.residual:
        return
    if train.model not in ("gcn", "sage", "gat"):
        raise ParamsError(f"train.residual=true applies to gcn, sage and gat, not "
                          f"train.model={train.model!r}; set train.residual: false")
    needed = 3 if train.jk == "none" else 2
    if train.num_layers < needed:
        raise ParamsError(
            f"train.residual=true adds skips between hidden layers, and train.num_layers="
            f"{train.num_layers} with train.jk={train.jk} has none (the first layer reads the "
            f"features, without jk the last writes the classes): use train.num_layers >= {needed}")


def _check_aggregation(params: Params) -> None:
    """train.aggregation=csr is a sparse product: gcn and sage (mean) on homogeneous graphs."""
    train = params.train
    if train.aggregation == "csr" and (train.model not in ("gcn", "sage")
                                       or params.dataset.graph_kind == "typed"):
        raise ParamsError(f"train.aggregation='csr' applies to gcn and sage on homogeneous "
                          f"graphs, not train.model={train.model!r} (graph_kind="
                          f"{params.dataset.graph_kind}); set train.aggregation: scatter or auto")


def _check_layerwise(params: Params) -> None:
    """train.inference.mode=layerwise evaluates what inference.py blocks:
    node and link task, plain and lightning engine, whole graph or partition shards."""
    train = params.train
    if train.inference.mode != "layerwise":
        return
    if params.dataset.graph_kind == "typed" and train.model not in TYPED_LAYERWISE_MODELS:
        raise ParamsError(f"train.inference.mode='layerwise' evaluates typed "
                          f"{' and '.join(TYPED_LAYERWISE_MODELS)} models, not train.model="
                          f"{train.model!r}; set train.inference.mode: auto or full")
    if params.dataset.graph_kind != "typed" and train.model not in ("mlp", "gcn", "sage", "gat"):
        raise ParamsError(f"train.inference.mode='layerwise' evaluates mlp, gcn, sage and gat, "
                          f"not train.model={train.model!r}; set train.inference.mode: auto or "
                          "full")


def _check_lightning(params: Params) -> None:
    """What ``train.engine: lightning`` runs (gnnpipe/lightning.py), named when it is not."""
    cfg, task = params.train, params.dataset.task
    if cfg.engine != "lightning":
        return
    found = []
    if task != "node":
        found.append(f"dataset.task={task!r}")
    if params.dataset.graph_kind == "typed":
        found.append("a typed graph")
    if cfg.sampler not in LIGHTNING_SAMPLERS:
        found.append(f"train.sampler={cfg.sampler!r}")
    if cfg.model not in LIGHTNING_MODELS:
        found.append(f"train.model={cfg.model!r}")
    if cfg.dist.world_size > 1:
        found.append(f"train.dist.nproc={cfg.dist.nproc}, train.dist.nnodes={cfg.dist.nnodes}")
    if cfg.temporal.by != "none":  # seed times are not passed to Lightning
        found.append(f"train.temporal.by={cfg.temporal.by!r}")
    if found:
        raise ParamsError(
            f"train.engine='lightning' supports homogeneous node classification "
            f"(dataset.task=node) with train.sampler {' or '.join(LIGHTNING_SAMPLERS)}, "
            f"train.model {' | '.join(LIGHTNING_MODELS)}, without train.temporal, on one "
            f"process (train.dist.nproc=1, train.dist.nnodes=1); found {'; '.join(found)}. Use "
            "train.engine=plain for the rest")


def _check_split_mode(params: Params) -> None:
    """split.node.mode=time cuts message graphs at the split's timestamps (strategy time)."""
    cfg = params.split.node
    if cfg.mode == "time" and cfg.strategy != "time":
        raise ParamsError(f"split.node.mode='time' cuts message graphs at the time split's "
                          f"boundaries and needs split.node.strategy=time (found "
                          f"{cfg.strategy!r}); use split.node.mode: auto, transductive or "
                          "inductive")


def _check_cluster_batch(params: Params) -> None:
    """A ClusterGCN batch joins parts of data/partition, so it cannot ask for more than exist."""
    cfg = params.train
    if cfg.sampler == "cluster" and cfg.cluster.parts_per_batch > params.partition.num_parts:
        raise ParamsError(f"train.cluster.parts_per_batch={cfg.cluster.parts_per_batch} exceeds "
                          f"partition.num_parts={params.partition.num_parts}: a batch joins "
                          "that many parts; lower the first or raise the second")
    if cfg.cluster.keep_inter_cluster_edges and cfg.dist.shard == "partition":
        raise ParamsError("train.cluster.keep_inter_cluster_edges=true needs the whole train "
                          "graph; use train.dist.shard: none")


def _check_pairs(params: Params) -> None:
    """predict.pairs scores candidate links: the link task's decoder."""
    if params.predict.pairs and params.dataset.task != "link":
        raise ParamsError(f"predict.pairs={params.predict.pairs!r} scores candidate links and "
                          f"needs dataset.task=link (found {params.dataset.task!r}); set it to \"\"")


def _check_feature_file(params: Params) -> None:
    """features.npy is written for homogeneous graphs only."""
    if params.dataset.storage.features == "external" and params.dataset.graph_kind == "typed":
        raise ParamsError("dataset.storage.features='external' is for homogeneous graphs; typed "
                          "graphs keep x per node type in graph.pt (use inline)")


RULES = (_check_feature_file, _check_sign, _check_typed_source, _check_typed_needs_hetero,
         _check_hgt_budgets, _check_typed_train, _check_heads, _check_task_sampler,
         _check_fanouts, _check_temporal, _check_weighted, _check_shard, _check_link_processes, _check_rendezvous, _check_residual,
         _check_layerwise, _check_lightning, _check_pairs, _check_split_mode,
         _check_cluster_batch, _check_aggregation)


# ---------------------------------------------------------------------------------- coercion
def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of: " + ", ".join(str(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is tuple:
        return f"a non-empty list of {_type_name(typing.get_args(tp)[0])}"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str, empty_ok: bool = False) -> Any:
    """Value converted to ``tp`` or a ParamsError naming ``key``."""
    origin = typing.get_origin(tp)
    bad = ParamsError(f"params: {key}={value!r} is not valid; expected {_type_name(tp)}")
    if origin is Literal:
        if value in typing.get_args(tp) and not isinstance(value, bool):
            return value
        raise bad
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if isinstance(value, float) and float in options:  # 1.0 stays a fraction, not a count
            return _coerce(value, float, key)
        for option in options:  # first match wins: int before float
            try:
                return _coerce(value, option, key)
            except ParamsError:
                continue
        raise bad
    if origin is tuple:  # tuple[int, ...]: a YAML list, kept a tuple so frozen params hash
        item_type = typing.get_args(tp)[0]
        if empty_ok and isinstance(value, (list, tuple)) and not value:
            return ()
        if not isinstance(value, (list, tuple)) or not value:
            raise ParamsError(f"params: {key}={value!r} is not valid; expected a non-empty list "
                              f"of {_type_name(item_type)}")
        return tuple(_coerce(v, item_type, f"{key}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, dict) and key in MOVED:  # train.inference: auto (old layout)
            raise _moved(key)
        if not isinstance(value, dict):
            raise ParamsError(f"params: {key} must be a mapping of keys, got {value!r}")
        return _build(tp, value, key)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
            return int(value)  # 1e6 in YAML is a float; accept it as a count
        raise bad
    if tp is float:
        if isinstance(value, str):  # PyYAML reads "5e-4" as a string
            try:
                value = float(value)
            except ValueError:
                raise bad from None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # NaN would pass every range check
                raise ParamsError(f"params: {key}={value!r} is not a finite number")
            return float(value)
        raise bad
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad
    raise TypeError(f"unsupported params type {tp!r} for {key}")  # programming error


def _check_range(value: Any, meta: typing.Mapping, key: str) -> None:
    if isinstance(value, tuple):  # a list param: the bounds hold for every item
        for i, item in enumerate(value):
            _check_range(item, meta, f"{key}[{i}]")
        return
    if not meta or not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    low, high = meta.get("low"), meta.get("high")
    if low is not None and (value < low or (meta["low_open"] and value == low)):
        op = ">" if meta["low_open"] else ">="
        raise ParamsError(f"params: {key}={value!r} is out of range; expected {op} {low}")
    if high is not None and (value > high or (meta["high_open"] and value == high)):
        op = "<" if meta["high_open"] else "<="
        raise ParamsError(f"params: {key}={value!r} is out of range; expected {op} {high}")


def _moved(key: str) -> ParamsError:
    return ParamsError(f"params: {key} moved to {MOVED[key]}")


def _build(cls: type, raw: dict, prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    for name in unknown:
        if f"{prefix}.{name}" in MOVED:
            raise _moved(f"{prefix}.{name}")
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ParamsError(
            f"params: unknown key {where}{unknown[0]}; allowed keys in "
            f"{prefix or 'the top level'}: {', '.join(fields)}")
    kwargs = {}
    for name, value in raw.items():
        key = f"{prefix}.{name}" if prefix else name
        kwargs[name] = _coerce(value, hints[name], key,
                               empty_ok=fields[name].metadata.get("empty_ok", False))
        _check_range(kwargs[name], fields[name].metadata, key)
    return cls(**kwargs)


def params_from_dict(raw: dict) -> Params:
    """Params validated from a plain mapping (as parsed from YAML)."""
    if not isinstance(raw, dict):
        raise ParamsError(f"params: the file must hold a mapping of sections, got {type(raw).__name__}")
    return _build(Params, raw, "")


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key repeated in one mapping (YAML would keep the last one)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ParamsError(f"params: key {key!r} appears twice in one section (line "
                                  f"{key_node.start_mark.line + 1}); keep one")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_params(path: str | Path = DEFAULT_PARAMS) -> Params:
    """Params read and validated from a YAML file (keys left out take their defaults)."""
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"params: file {path} not found")
    if path.is_dir():
        raise ParamsError(f"params: {path} is a directory; expected a file (--params)")
    try:
        raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader) or {}
    except yaml.YAMLError as err:
        raise ParamsError(f"params: {path} is not valid YAML: {err}".replace("\n", " ")) from None
    except ParamsError as err:  # a repeated key
        raise ParamsError(str(err).replace("params:", f"{path}:", 1)) from None
    try:
        return params_from_dict(raw)
    except ParamsError as err:
        raise ParamsError(str(err).replace("params:", f"{path}:", 1)) from None


def to_dict(params: Any) -> dict:
    """Plain nested dict of a params dataclass (for writing and hashing)."""
    return dataclasses.asdict(params)


def replace(params: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` that reaches into sub-sections: a dict given for a dataclass field
    replaces inside it, e.g. ``replace(train, epochs=2, neighbor={"num_neighbors": (4, 3)})``."""
    for name, value in changes.items():
        current = getattr(params, name)
        if isinstance(value, dict) and dataclasses.is_dataclass(current):
            changes[name] = replace(current, **value)
    return dataclasses.replace(params, **changes)
