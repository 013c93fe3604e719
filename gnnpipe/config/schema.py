"""The typed sections of ``params.yaml``: one frozen dataclass per section, each field with its
default, its allowed values (a ``Literal``) and its numeric bounds (``num``).

The comment above a field and the one at the end of its line are its documentation:
``gnnpipe/params_doc.py`` reads them into the params tables. Plain data: the cross-field rules
are gnnpipe/config/rules.py and the sampler table's (gnnpipe/config/samplers.py), and
gnnpipe/config/loading.py reads YAML into these types and runs both on every ``Params`` it builds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union


def num(default: Any, low: float | None = None, high: float | None = None, *,
        low_open: bool = False, high_open: bool = False) -> Any:
    """A field with its default and the numeric range every value (every item of a list) must
    lie in: the loader enforces it, params_doc shows it."""
    return field(default=default, metadata={"low": low, "high": high, "low_open": low_open,
                                            "high_open": high_open})


# ----------------------------------------------------------------------------------- sections
@dataclass(frozen=True)
class SyntheticParams:
    """Contextual degree-corrected SBM: class-correlated features and tunable homophily."""

    num_nodes: int = num(20_000, low=2)  # nodes (papers with dataset.layout typed)
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
    # dataset.layout typed: papers (num_nodes, the labelled type) / authors / venues instead
    num_authors: int = num(5_000, low=1)  # layout typed only
    num_venues: int = num(20, low=1)  # layout typed only; venue v has class v mod num_classes
    authors_per_paper: float = num(3.0, low=0.0, low_open=True)  # layout typed only: writes per paper


@dataclass(frozen=True)
class NodeTableParams:
    """The node table of ``dataset.source: parquet | csv`` (one row per node)."""

    file: str = ""  # relative to dataset.path; "" = nodes.parquet / nodes.csv (typed: nodes/)
    id: str = "id"  # any unique integer or string id; remapped to 0..N-1 in file order
    # one list/array column, or comma-separated scalar columns / globs ("f0,f1" or "feat_*")
    features: str = "x"
    label: str = "label"  # integer or string classes, remapped to dense codes 0..C-1
    timestamp: str = ""  # optional column kept in node_ids_<type>.parquet; "" = none
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
    weight: str = ""  # optional numeric column kept in edge_attrs_<edge type>.parquet; "" = none
    timestamp: str = ""  # optional; merged duplicates keep their earliest row


@dataclass(frozen=True)
class StorageParams:
    """How prepare stores the graph: bytes on disk against precision (docs/scaling.md)."""

    # graph.pt features; float16/bfloat16 halve x on disk, readers compute in float32
    feature_dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    compression: Literal["zstd", "snappy", "lz4", "gzip", "none"] = "zstd"  # prepare's Parquet
    # x in graph.pt (inline) or in features_<type>.npy, streamed by prepare and read row by row
    # (external; auto: external from 1 GiB of stored features); docs/scaling.md
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
    # typed: node and edge types; parquet / csv / ogb read one table per node type and per
    # relation (docs/typed-graphs.md), synthetic generates the papers / authors / venues graph
    layout: Literal["homogeneous", "typed"] = "homogeneous"
    typed: TypedParams = field(default_factory=TypedParams)
    max_classes: int = num(1000, low=2)  # more distinct label values than this is refused


@dataclass(frozen=True)
class NodeSplitParams:
    # public: the dataset's official split (planetoid, ogb, pyg masks); sizes are then ignored
    strategy: Literal["random", "stratified", "cluster", "time", "public"] = "stratified"
    # Per-phase message graphs (gnnpipe/splitting/split.py). auto: time for strategy time, else
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
    """Edge hold-out for ``dataset.task: link`` (see gnnpipe/splitting/link_split.py)."""

    # A float in (0, 1) is a fraction of the graph's edges (undirected pairs); an int a count.
    val: Union[int, float] = num(0.1, low=0.0, low_open=True)
    test: Union[int, float] = num(0.1, low=0.0, low_open=True)  # as val
    # Share of training edges used only as supervision, never for message passing (PyG's
    # RandomLinkSplit disjoint_train_ratio); 0 = every training edge does both.
    disjoint_train_ratio: float = num(0.0, low=0.0, high=1.0, high_open=True)
    num_val_negatives: int = num(100, low=1)  # fixed negatives per val positive
    num_test_negatives: int = num(100, low=1)  # fixed negatives per test positive
    negative_strategy: Literal["uniform", "degree"] = "uniform"  # degree: hard, degree-matched
    # HeaRT-style hard negatives per val/test positive, beside the random ones: the targets of
    # highest resource allocation from its source in the train graph (0 = none)
    num_hard_negatives: int = num(100, low=0)


@dataclass(frozen=True)
class SplitParams:
    node: NodeSplitParams = field(default_factory=NodeSplitParams)
    link: LinkSplitParams = field(default_factory=LinkSplitParams)
    # How nodes (strategies random / stratified) and link pairs are drawn: hash, a seeded hash
    # of each id, so the split is computed by blocks on any engine and number of workers
    # (gnnpipe/splitting/hash_assign.py); the one-process permutation is gone (docs/splits.md)
    assign: Literal["hash"] = "hash"


@dataclass(frozen=True)
class PartitionParams:
    # metis: min-cut k-way (the whole graph in one process); lp: balanced label propagation by
    # blocks of rows, on cluster.engine (graphops/partition_lp.py); random / bfs (contiguous
    # chunks of a BFS order): cheap baselines
    method: Literal["metis", "lp", "random", "bfs"] = "metis"
    # metis only. auto: pyg_lib or torch_sparse METIS when importable (and built with METIS),
    # else pymetis (a dependency, bundles METIS)
    backend: Literal["auto", "pymetis", "torch_sparse", "pyg_lib"] = "auto"
    num_parts: int = num(8, low=1)  # parts (and shards) of the train-phase graph
    # none: balance node counts; degree: balance 1 + in-degree (aggregation work) [metis, bfs]
    node_weight: Literal["none", "degree"] = "none"
    # multiplicity: an edge weighs the number of stored directed edges it stands for [metis]
    edge_weight: Literal["none", "multiplicity"] = "none"
    # metis: tolerance (pymetis ufactor/1000); lp: hard cap, every part <= (1 + imbalance) * mean
    imbalance: float = num(0.03, low=0.001, high=1.0)
    iterations: int = num(30, low=1)  # lp: most sweeps per bisection level, then k-way sweeps
    min_moved: float = num(0.001, low=0.0, high=1.0)  # lp: a level ends when fewer nodes move
    block_rows: int = num(131_072, low=1)  # lp: rows per block task (results do not depend on it)
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
class FitParams:
    """A neural model's size and its optimisation loop: the GNN's (train) and the MLP
    baseline's (baseline)."""

    hidden: int = num(64, low=1)  # hidden channels
    num_layers: int = num(2, low=1)  # layers (message-passing layers for a GNN)
    dropout: float = num(0.5, low=0.0, high=1.0, high_open=True)  # between layers
    lr: float = num(0.01, low=0.0, low_open=True)  # Adam learning rate
    weight_decay: float = num(0.0005, low=0.0)  # Adam weight decay
    epochs: int = num(200, low=1)  # at most; early stopping may end sooner
    patience: int = num(50, low=1)  # epochs without val improvement before stopping


@dataclass(frozen=True)
class GbdtParams:
    """Gradient-boosted trees on node features alone (LightGBM; gnnpipe/training/gbdt.py)."""

    num_leaves: int = num(31, low=2)  # leaves per tree
    learning_rate: float = num(0.1, low=0.0, low_open=True)  # shrinkage of each round's trees
    max_rounds: int = num(1000, low=1)  # boosting rounds (one tree per class each) at most
    # rounds without a lower val multi_logloss before stopping (the best round is kept)
    early_stopping_rounds: int = num(50, low=1)
    min_data_in_leaf: int = num(20, low=1)  # train rows a leaf must hold
    # share of the feature columns each tree may split on (drawn per tree, seeded)
    feature_fraction: float = num(1.0, low=0.0, high=1.0, low_open=True)


@dataclass(frozen=True)
class BaselineParams(FitParams):
    """The structure-free models trained on the same split as the GNN; the FitParams keys
    (hidden .. patience) are the MLP's."""

    # which structure-free models the baseline stage fits: mlp (the neural keys above), gbdt
    # (baseline.gbdt; node task only); each at most once
    # auto: mlp, plus gbdt when the train rows x feature columns are at most auto_gbdt_cells
    # (node task; link: mlp)
    models: Union[Literal["auto"], tuple[Literal["mlp", "gbdt"], ...]] = "auto"
    # baseline.models auto: the largest train rows x feature columns gbdt is fitted on
    auto_gbdt_cells: int = num(5_000_000, low=0)
    gbdt: GbdtParams = field(default_factory=GbdtParams)
    # feature rows read from the prepared file at once (a multiple of 4096; results do not
    # depend on it: the gradient sums fixed 4096-row chunks, docs/evaluation.md)
    block_rows: int = num(65_536, low=1)


@dataclass(frozen=True)
class InferenceParams:
    """Evaluation forward (gnnpipe/training/inference.py): the whole graph at once, or layer by
    layer over blocks of target nodes (peak memory ~ N x hidden x 2 + block edges x width)."""

    # auto: layerwise once num_edges x max(in_dim, hidden) passes inference.AUTO_MESSAGE_FLOATS,
    # and always on several DDP ranks (each would hold every edge's messages otherwise)
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
    """DDP through torchrun (gnnpipe/training/distributed.py): processes per machine and machines,
    and the bounds on every wait (docs/scaling.md)."""

    nproc: int = num(1, low=1)
    nnodes: int = num(1, low=1)
    node_rank: int = num(0, low=0)  # this machine's index when nnodes > 1
    rdzv_endpoint: str = ""  # host:port of machine 0 when nnodes > 1 (it hosts the rendezvous)
    timeout_s: float = num(300.0, low=0.0, low_open=True)  # bound on forming the group, collectives
    # bound on the rendezvous: every machine joins and the endpoint answers within it, else the
    # stage fails with one line (hard stop after this + distributed.START_GRACE_S)
    rdzv_timeout_s: float = num(300.0, low=1.0)
    # refuse ranks x DataLoader workers whose memory floor (gnnpipe/training/capacity.py) passes
    # what the machine has available; false = launch anyway
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
class EmbeddingsParams:
    """Learnable node embeddings (gnnpipe/training/embeddings.py, docs/models.md): one row of
    ``dim`` floats per node of the chosen types, trained with sparse row gradients (SparseAdam),
    saved in model.pt; a node no training step reached reads the mean of the trained rows."""

    dim: int = num(0, low=0)  # width of each node's learnable row; 0 = off (features only)
    # node types that get a table: all (a homogeneous graph's one type), featureless (the types
    # that had no feature columns in your tables, as graph.json lists them), or a list of names
    types: Union[Literal["all", "featureless"], tuple[str, ...]] = "all"
    # concat: [features | embedding] rows into the first layer; alone: the embedding replaces
    # the type's features
    combine: Literal["concat", "alone"] = "concat"


@dataclass(frozen=True)
class TrainParams(FitParams):
    # hgt / rgcn: heterogeneous graphs only (sage is then to_hetero(GraphSAGE); gnnpipe/hetero)
    # sep: ego / neighbour separation, each layer's own and neighbours' states through separate
    # weights, concatenated, with skips and layer norm: the model for low homophily (docs/models.md)
    model: Literal["mlp", "gcn", "sage", "gat", "sign", "hgt", "rgcn", "sep"] = "sage"
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
    # where the train stage runs (gnnpipe/training/device.py): auto = cuda when torch sees a CUDA
    # device, else cpu; cuda without one is refused at the start of the stage
    device: Literal["auto", "cpu", "cuda"] = "auto"
    compile: bool = False  # torch.compile(model, dynamic=True); fails loudly if it cannot
    # who runs the loop: gnnpipe.training.train.fit, or a Lightning Trainer
    # (gnnpipe/training/lightning.py)
    engine: Literal["plain", "lightning"] = "plain"
    # message passing of gcn / sage: auto (csr for gcn and sage on homogeneous graphs, scatter
    # elsewhere), scatter (per-edge messages), csr (sparse CSR product over target rows), timed
    # (the faster of the two, timed on the first training batch: may differ between runs)
    aggregation: Literal["auto", "scatter", "csr", "timed"] = "auto"
    inference: InferenceParams = field(default_factory=InferenceParams)
    neighbor: NeighborParams = field(default_factory=NeighborParams)
    temporal: TemporalParams = field(default_factory=TemporalParams)
    shadow: ShadowParams = field(default_factory=ShadowParams)
    hgt: HgtParams = field(default_factory=HgtParams)
    cluster: ClusterParams = field(default_factory=ClusterParams)
    saint: SaintParams = field(default_factory=SaintParams)
    dist: DistParams = field(default_factory=DistParams)
    checkpoint: CheckpointParams = field(default_factory=CheckpointParams)
    embeddings: EmbeddingsParams = field(default_factory=EmbeddingsParams)
    # intra-op threads of the train stage (each DDP rank): inherit the top-level threads, or
    # auto | a count (gnnpipe/runtime/threads.py)
    threads: Union[Literal["auto", "inherit"], int] = num("inherit", low=1)
    # node task: balanced weighs each class's loss by n / (C x its train count) (sklearn's
    # "balanced"); the GNN, the MLP and gbdt alike, so the verdict stays a fair comparison
    class_weight: Literal["none", "balanced"] = "none"


@dataclass(frozen=True)
class CurvatureParams:
    """The bottleneck measure (gnnpipe/graphops/reach.py edge_curvature): Balanced Forman
    curvature of a seeded uniform sample of undirected edges (every edge when there are fewer:
    exact), the ``most_negative`` of them listed."""

    sample_edges: int = num(10_000, low=0)  # undirected edges sampled; 0 = no curvature
    most_negative: int = num(10, low=0)  # the most negative sampled edges listed


@dataclass(frozen=True)
class AnalyzeParams:
    """Thresholds of the graph diagnostics' warnings (metrics/graph.json)."""

    low_homophily: float = num(0.2, low=-1.0, high=1.0)  # adjusted homophily below this: warn
    max_isolated_fraction: float = num(0.1, low=0.0, high=1.0)  # more isolated nodes: warn
    curvature: CurvatureParams = field(default_factory=CurvatureParams)


@dataclass(frozen=True)
class ReachParams:
    """When evaluate warns that the graph's benefit falls with the distance to labels
    (gnnpipe/graphops/reach.py accuracy_by_distance): from the nearest to the farthest distance
    bin holding at least ``min_count`` test nodes, the GNN's accuracy falls, and by at least
    ``min_excess`` more than the baseline's, with the 95% interval of that excess above 0."""

    min_count: int = num(30, low=1)  # test nodes a distance bin needs to count
    # the GNN's accuracy fall minus the baseline's, nearest to farthest bin, that warns
    min_excess: float = num(0.10, low=0.0, high=2.0)


@dataclass(frozen=True)
class LinkEvaluateParams:
    """dataset.task link (gnnpipe/reporting/link_evaluate.py)."""

    # the split's negatives each model is ranked against: random (the GNN vs the MLP only, as
    # before), hard (split.link.num_hard_negatives, with preferential attachment and, unless
    # the relation is bipartite, the CN / AA / RA heuristics) or both;
    # with hard or both the verdict is on the hard ones, against the best baseline on val
    negatives: Literal["random", "hard", "both"] = "both"


@dataclass(frozen=True)
class EvaluateParams:
    # node task: what the verdict, its interval, the seeds, the headline and early stopping (val)
    # are judged on; auto: roc_auc for two classes, macro_f1 when the majority class holds more
    # than half of the labelled nodes, else accuracy (gnnpipe/reporting/node_metric.py)
    metric: Literal["auto", "accuracy", "macro_f1", "roc_auc", "average_precision"] = "auto"
    min_gain: float = num(0.01, low=0.0)  # GNN gain over the baseline below this: "inconclusive"
    # paired bootstrap draws over the test nodes (edges): the 95% interval of the gap
    bootstrap: int = num(1000, low=100)
    # training seeds of the GNN and the chosen baseline: 1 = the models train / baseline wrote;
    # N > 1 retrains both N - 1 more times on the same split and reports mean and spread
    seeds: int = num(1, low=1, high=100)
    hits_k: tuple[int, ...] = num((10, 50), low=1)  # link task: Hits@K for each K
    reach: ReachParams = field(default_factory=ReachParams)
    link: LinkEvaluateParams = field(default_factory=LinkEvaluateParams)


@dataclass(frozen=True)
class FeaturesParams:
    """How node features are normalized before every model reads them (gnnpipe/data/features.py)."""

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
class TlsParams:
    """TLS with mutual authentication to the scheduler at ``cluster.address: tls://host:port``
    (docs/scaling.md): paths to PEM files, never their text, so no key reaches params.yaml or git;
    a relative path is from the repository root, where the stages run."""

    # the cluster's CA certificate (dask scheduler/worker --tls-ca-file): the scheduler's
    # certificate must be signed by it, and it must have signed this client's
    ca_file: str = field(default="", metadata={"empty_ok": True})
    cert_file: str = field(default="", metadata={"empty_ok": True})  # this client's certificate
    # this client's private key, unencrypted (the stages cannot ask for a passphrase): chmod 600
    key_file: str = field(default="", metadata={"empty_ok": True})


@dataclass(frozen=True)
class EngineParams:
    """Where prepare, split, partition, propagate, analyze and baseline run their block work
    (gnnpipe/runtime/engine.py): ``local`` in the stage process, ``dask`` on a Dask cluster."""

    engine: Literal["local", "dask"] = "local"
    # dask: a running cluster's scheduler, whose workers see the stage's paths: tls://host:8786
    # with cluster.tls (tcp:// only on loopback, unless allow_insecure); "" starts an embedded
    # LocalCluster on 127.0.0.1 inside the stage and stops it at exit
    address: str = field(default="", metadata={"empty_ok": True})
    tls: TlsParams = field(default_factory=TlsParams)
    # true: accept a plain tcp:// address past loopback (a network only you reach); anyone who
    # reaches that scheduler runs code on every worker. Each stage that uses it warns
    allow_insecure: bool = False
    workers: int = num(2, low=1)  # embedded LocalCluster: worker processes
    threads_per_worker: int = num(1, low=1)  # embedded LocalCluster: threads in each worker
    # embedded LocalCluster: memory per worker, Dask's spelling (512MiB, 1GiB, 2GB); Dask spills
    # to the run's scratch folder near it and restarts a worker that passes it
    memory_limit: str = "1GiB"
    start_timeout_s: float = num(60.0, low=0.0, low_open=True)  # bounded wait for the cluster


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
    cluster: EngineParams = field(default_factory=EngineParams)
    # intra-op threads of every stage process: auto (cores available / DDP ranks on the
    # machine, gnnpipe/runtime/threads.py) or a count; outputs are byte-identical per thread count
    threads: Union[Literal["auto"], int] = num("auto", low=1)
