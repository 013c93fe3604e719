"""The cross-field rules of ``params.yaml``: every check that reads more than one key.

Each rule takes the whole ``Params`` and raises a one-line ``ParamsError`` naming the keys and
what to set instead; ``check`` runs ``RULES`` in order, and the loader (gnnpipe/config/loading.py)
runs ``check`` on every ``Params`` it builds or replaces. Rules that need the data (graph sizes,
split meta) stay where the data is read.
"""

from __future__ import annotations

from gnnpipe.config.errors import ParamsError
from gnnpipe.config.schema import Params


# --------------------------------------------------------------------------- data and split
TYPED_SOURCES = ("synthetic", "parquet", "csv", "ogb")  # dataset.layout: typed readers


def _check_typed_source(params: Params) -> None:
    """Typed graphs come from the built-in generator or from typed tables / OGB-MAG folders."""
    dataset = params.dataset
    source = dataset.source
    if dataset.layout == "typed" and source not in TYPED_SOURCES:
        raise ParamsError(f"dataset.layout='typed' needs dataset.source "
                          f"{' | '.join(TYPED_SOURCES)} (synthetic: the built-in typed graph), "
                          f"not {source!r}")
    if dataset.layout == "typed" and dataset.edges.weight:
        raise ParamsError(f"dataset.edges.weight={dataset.edges.weight!r} is not supported with "
                          "dataset.layout='typed' (typed graphs keep no edge weights); set it "
                          "to \"\"")


def _check_feature_file(params: Params) -> None:
    """features.npy is written for homogeneous graphs only."""
    if params.dataset.storage.features == "external" and params.dataset.layout == "typed":
        raise ParamsError("dataset.storage.features='external' is for homogeneous graphs; typed "
                          "graphs keep x per node type in graph.pt (use inline)")


def _check_split_mode(params: Params) -> None:
    """split.node.mode=time cuts message graphs at the split's timestamps (strategy time)."""
    cfg = params.split.node
    if cfg.mode == "time" and cfg.strategy != "time":
        raise ParamsError(f"split.node.mode='time' cuts message graphs at the time split's "
                          f"boundaries and needs split.node.strategy=time (found "
                          f"{cfg.strategy!r}); use split.node.mode: auto, transductive or "
                          "inductive")


def _check_pairs(params: Params) -> None:
    """predict.pairs scores candidate links: the link task's decoder."""
    if params.predict.pairs and params.dataset.task != "link":
        raise ParamsError(f"predict.pairs={params.predict.pairs!r} scores candidate links and "
                          f"needs dataset.task=link (found {params.dataset.task!r}); set it to \"\"")


# ---------------------------------------------------------- models, inference and processes
TYPED_LAYERWISE_MODELS = ("sage", "rgcn")  # typed models gnnpipe/inference.py blocks


def _check_heads(params: Params) -> None:
    """gat and hgt split train.hidden channels across train.heads."""
    cfg = params.train
    if cfg.model in ("gat", "hgt") and cfg.hidden % cfg.heads:
        raise ParamsError(
            f"train.hidden={cfg.hidden} must be divisible by train.heads={cfg.heads} for "
            f"{cfg.model} (each head gets hidden / heads channels)")


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
                                       or params.dataset.layout == "typed"):
        raise ParamsError(f"train.aggregation='csr' applies to gcn and sage on homogeneous "
                          f"graphs, not train.model={train.model!r} (dataset.layout="
                          f"{params.dataset.layout}); set train.aggregation: scatter or auto")


def _check_layerwise(params: Params) -> None:
    """train.inference.mode=layerwise evaluates what inference.py blocks:
    node and link task, plain and lightning engine, whole graph or partition shards."""
    train = params.train
    if train.inference.mode != "layerwise":
        return
    if params.dataset.layout == "typed" and train.model not in TYPED_LAYERWISE_MODELS:
        raise ParamsError(f"train.inference.mode='layerwise' evaluates typed "
                          f"{' and '.join(TYPED_LAYERWISE_MODELS)} models, not train.model="
                          f"{train.model!r}; set train.inference.mode: auto or full")
    if params.dataset.layout != "typed" and train.model not in ("mlp", "gcn", "sage", "gat"):
        raise ParamsError(f"train.inference.mode='layerwise' evaluates mlp, gcn, sage and gat, "
                          f"not train.model={train.model!r}; set train.inference.mode: auto or "
                          "full")


def _check_rendezvous(params: Params) -> None:
    """Several machines meet at train.dist.rdzv_endpoint (torchrun's c10d rendezvous)."""
    dist = params.train.dist
    if dist.nnodes > 1 and not dist.rdzv_endpoint:
        raise ParamsError(f"train.dist.nnodes={dist.nnodes} needs train.dist.rdzv_endpoint "
                          "(host:port of the first machine)")
    if dist.node_rank >= dist.nnodes:  # torchrun would wait for a machine that cannot exist
        raise ParamsError(f"train.dist.node_rank={dist.node_rank} is out of range for "
                          f"train.dist.nnodes={dist.nnodes}; expected 0 .. {dist.nnodes - 1}")


# --------------------------------------------------------------------------------- samplers
# What each train.sampler needs and allows (task, graph kind, model, engine, processes,
# partition): to be replaced by the sampler table (gnnpipe/sampling/table.py).
HETERO_MODELS = ("sage", "hgt", "rgcn", "mlp")  # sage = to_hetero(GraphSAGE)
TYPED_NODE_SAMPLERS = ("full", "hgt", "neighbor")  # hgt: per-type node budgets
TYPED_LINK_SAMPLERS = ("full", "link_neighbor")  # link_neighbor: typed supervision batches
TYPED_DDP_SAMPLERS = {"node": "neighbor", "link": "link_neighbor"}  # seeds split across ranks
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


def _check_typed_needs_hetero(params: Params) -> None:
    """hgt / rgcn and the hgt sampler work on heterogeneous graphs only."""
    cfg, hetero = params.train, params.dataset.layout == "typed"
    if cfg.model in ("hgt", "rgcn") and not hetero:
        raise ParamsError(
            f"train.model={cfg.model!r} needs a heterogeneous graph (dataset.layout: typed); "
            "for a homogeneous graph use mlp, gcn, sage, gat or sign")
    if cfg.sampler == "hgt" and not hetero:
        raise ParamsError("train.sampler='hgt' samples typed node budgets and needs a "
                          "heterogeneous graph (dataset.layout: typed)")


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
    if params.dataset.layout != "typed":
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


def _check_lightning(params: Params) -> None:
    """What ``train.engine: lightning`` runs (gnnpipe/lightning.py), named when it is not."""
    cfg, task = params.train, params.dataset.task
    if cfg.engine != "lightning":
        return
    found = []
    if task != "node":
        found.append(f"dataset.task={task!r}")
    if params.dataset.layout == "typed":
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


# ----------------------------------------------------------------------------- the one list
# The order decides which message a params file with several faults gets.
RULES = (
    _check_feature_file, _check_sign, _check_typed_source, _check_typed_needs_hetero,
    _check_hgt_budgets, _check_typed_train, _check_heads, _check_task_sampler, _check_fanouts,
    _check_temporal, _check_weighted, _check_shard, _check_link_processes, _check_rendezvous,
    _check_residual, _check_layerwise, _check_lightning, _check_pairs, _check_split_mode,
    _check_cluster_batch, _check_aggregation)


def check(params: Params) -> None:
    """Run every rule of ``RULES`` on ``params``; the first that fails raises its ParamsError."""
    for rule in RULES:
        rule(params)
