"""The cross-field rules of ``params.yaml`` that do not depend on ``train.sampler`` (those are
read from the sampler table, samplers.py).

Each rule takes the whole ``Params`` and raises a one-line ``ParamsError`` naming the keys and
what to set instead; ``check`` runs ``RULES`` in order, and the loader (gnnpipe/config/loading.py)
runs it, before the sampler table's ``check``, on every ``Params`` it builds or replaces. Rules
that need the data (graph sizes, split meta) stay where the data is read.
"""

from __future__ import annotations

import ipaddress
import re

from gnnpipe.config.errors import ParamsError
from gnnpipe.config.schema import EngineParams, Params


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
    """features_<T>.npy (external, auto) and half-precision x are one-type storage options."""
    storage = params.dataset.storage
    if params.dataset.layout != "typed":
        return
    for key, value, default in (("features", storage.features, "inline"),
                                ("feature_dtype", storage.feature_dtype, "float32")):
        if value != default:
            raise ParamsError(f"dataset.storage.{key}={value!r} is for homogeneous graphs; typed "
                              f"graphs keep x per node type in graph.pt, float32 (use {default})")


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


def _check_baseline_models(params: Params) -> None:
    """baseline.models names each structure-free model once; gbdt classifies nodes (no link
    decoder yet)."""
    models = params.baseline.models
    if models == "auto":  # resolved by the baseline stage (node task: mlp, gbdt under a budget)
        return
    repeated = next((m for i, m in enumerate(models) if m in models[:i]), None)
    if repeated is not None:
        raise ParamsError(f"baseline.models={list(models)} lists {repeated!r} twice; name each "
                          "model once")
    if "gbdt" in models and params.dataset.task == "link":
        raise ParamsError(f"baseline.models={list(models)}: gbdt classifies nodes and has no "
                          "link decoder yet, so it needs dataset.task=node; with dataset.task="
                          "link use baseline.models: [mlp] or auto")


def _check_node_metric(params: Params) -> None:
    """evaluate.metric and train.class_weight are about node classes; a link run is judged on
    MRR and its loss has no classes to weigh."""
    if params.dataset.task != "link":
        return
    if params.evaluate.metric != "auto":
        raise ParamsError(f"evaluate.metric={params.evaluate.metric!r} chooses the node task's "
                          "metric; dataset.task=link is judged on test MRR: set evaluate.metric "
                          "to auto")
    if params.train.class_weight != "none":
        raise ParamsError(f"train.class_weight={params.train.class_weight!r} weighs node classes; "
                          "dataset.task=link has none: set train.class_weight to none")


# node ids per term of the blocks baseline's gradient sum (gnnpipe/training/block_fit.py): blocks
# of baseline.block_rows hold whole chunks, so the sum's order does not depend on block_rows
BASELINE_CHUNK_ROWS = 4096


def _check_baseline_blocks(params: Params) -> None:
    """The baseline reads whole chunks of its gradient sum at once."""
    cfg = params.baseline
    if cfg.block_rows % BASELINE_CHUNK_ROWS:
        raise ParamsError(f"baseline.block_rows={cfg.block_rows} must be a multiple of "
                          f"{BASELINE_CHUNK_ROWS} (the node ids of one term of the gradient sum)")


def _check_hard_negatives(params: Params) -> None:
    """evaluate.link.negatives hard / both ranks against the hard negatives the split writes."""
    negatives = params.evaluate.link.negatives
    if (params.dataset.task == "link" and negatives != "random"
            and params.split.link.num_hard_negatives == 0):
        raise ParamsError(f"evaluate.link.negatives={negatives!r} needs hard negatives from the "
                          "split: set split.link.num_hard_negatives >= 1, or "
                          "evaluate.link.negatives: random")


def _check_seeds(params: Params) -> None:
    """evaluate.seeds > 1 retrains the node classifiers inside evaluate, on one process."""
    seeds = params.evaluate.seeds
    if seeds > 1 and params.dataset.task != "node":
        raise ParamsError(f"evaluate.seeds={seeds} retrains node classifiers and needs "
                          f"dataset.task=node (found {params.dataset.task!r}); set it to 1")
    if seeds > 1 and params.train.dist.world_size > 1:
        raise ParamsError(f"evaluate.seeds={seeds} retrains the GNN on one process, but "
                          f"train.dist runs {params.train.dist.world_size}: set "
                          "evaluate.seeds: 1 or train.dist.nproc and nnodes to 1")


# ---------------------------------------------------------- models, inference and processes
TYPED_LAYERWISE_MODELS = ("sage", "rgcn")  # typed models gnnpipe/training/inference.py blocks


def _check_heads(params: Params) -> None:
    """gat and hgt split train.hidden channels across train.heads."""
    cfg = params.train
    if cfg.model in ("gat", "hgt") and cfg.hidden % cfg.heads:
        raise ParamsError(
            f"train.hidden={cfg.hidden} must be divisible by train.heads={cfg.heads} for "
            f"{cfg.model} (each head gets hidden / heads channels)")


def _check_typed_training(params: Params) -> None:
    """The typed train path (gnnpipe/hetero) compiles no model and adds no residual skips."""
    cfg = params.train
    if params.dataset.layout == "typed" and (cfg.compile or cfg.residual):
        raise ParamsError("train.compile / train.residual are not supported for heterogeneous "
                          "graphs yet; set them to false")


def _check_sep(params: Params) -> None:
    """sep (gnnpipe/training/models.py SepGNN) splits each layer's train.hidden channels into an
    ego and a neighbour half, and has its skip connections built in."""
    train = params.train
    if train.model != "sep":
        return
    if train.hidden < 2:
        raise ParamsError(f"train.hidden={train.hidden} is too narrow for train.model=sep (each "
                          "layer keeps an ego and a neighbour half): use train.hidden >= 2")
    if train.residual:
        raise ParamsError("train.residual=true: train.model=sep has its skip connections built "
                          "in; set train.residual: false")


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
                          f"{params.dataset.layout}); set train.aggregation: auto or scatter")


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
    flat = ("mlp", "gcn", "sage", "gat", "sep")  # homogeneous models inference.py blocks
    if params.dataset.layout != "typed" and train.model not in flat:
        raise ParamsError(f"train.inference.mode='layerwise' evaluates {', '.join(flat[:-1])} and "
                          f"{flat[-1]}, not train.model={train.model!r}; set "
                          "train.inference.mode: auto or full")


def _check_embeddings(params: Params) -> None:
    """train.embeddings gives message-passing models a learnable row per node, looked up by the
    global node ids every batch carries; the features-only models stay features-only."""
    cfg, train = params.train.embeddings, params.train
    if cfg.dim == 0:
        if cfg.types != "all" or cfg.combine != "concat":
            raise ParamsError("train.embeddings.types / combine are set but train.embeddings."
                              "dim=0 turns embeddings off; set train.embeddings.dim >= 1 (or "
                              "leave types: all, combine: concat)")
        return
    if train.model in ("mlp", "sign"):
        raise ParamsError(f"train.embeddings.dim={cfg.dim}: train.model={train.model!r} is a "
                          f"features-only model (mlp: the structure-free one, sign: precomputed "
                          f"hop features) and takes no node embeddings; use gcn, sage, gat, sep, "
                          f"hgt or rgcn, or set train.embeddings.dim: 0")
    if train.dist.shard == "partition":
        raise ParamsError(f"train.embeddings.dim={cfg.dim} keeps a table of every node on each "
                          f"rank, but train.dist.shard='partition' holds only the rank's shard "
                          f"rows; set train.dist.shard: none or train.embeddings.dim: 0")
    if cfg.types == "featureless" and (params.dataset.layout != "typed"
                                       or params.dataset.source == "synthetic"):
        # homogeneous sources read feature columns; the built-in typed graph has x everywhere
        raise ParamsError(f"train.embeddings.types='featureless' gives rows to the node types "
                          f"without feature columns, but dataset.source="
                          f"{params.dataset.source!r} with dataset.layout="
                          f"{params.dataset.layout!r} gives every type features; use "
                          f"train.embeddings.types: all or name the types")
    if isinstance(cfg.types, tuple) and len(set(cfg.types)) != len(cfg.types):
        raise ParamsError(f"train.embeddings.types={list(cfg.types)} names a node type twice; "
                          f"name each once")


def _check_rendezvous(params: Params) -> None:
    """Several machines meet at train.dist.rdzv_endpoint (torchrun's c10d rendezvous)."""
    dist = params.train.dist
    if dist.nnodes > 1 and not dist.rdzv_endpoint:
        raise ParamsError(f"train.dist.nnodes={dist.nnodes} needs train.dist.rdzv_endpoint "
                          "(host:port of the first machine)")
    if dist.node_rank >= dist.nnodes:  # torchrun would wait for a machine that cannot exist
        raise ParamsError(f"train.dist.node_rank={dist.node_rank} is out of range for "
                          f"train.dist.nnodes={dist.nnodes}; expected 0 .. {dist.nnodes - 1}")


# ----------------------------------------------------------------------------------- engine
_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
MIN_WORKER_BYTES = 64 * 2**20  # below this a Dask worker cannot even start its own process


def memory_bytes(text: str) -> int | None:
    """Bytes of a Dask memory size (``512MiB``, ``1GiB``, ``2GB``, plain ``1000000``), or None."""
    match = _SIZE.match(text)
    if match is None or match.group(2).lower() not in _BYTE_UNITS:
        return None
    return int(float(match.group(1)) * _BYTE_UNITS[match.group(2).lower()])


def _check_engine(params: Params) -> None:
    """cluster.memory_limit is a size Dask reads, large enough for a worker process."""
    limit = params.cluster.memory_limit
    size = memory_bytes(limit)
    if size is None or size < MIN_WORKER_BYTES:
        raise ParamsError(f"cluster.memory_limit={limit!r} must be a memory size of at least "
                          "64MiB, with a unit B | kB | MB | GB | TB | KiB | MiB | GiB | TiB "
                          "(e.g. 1GiB)")


# ---------------------------------------------------------------------------------- cluster
TLS_KEYS = ("ca_file", "cert_file", "key_file")  # cluster.tls: the CA, this client's cert and key


def _address_host(address: str) -> tuple[str, str]:
    """(scheme, host) of a Dask address: ``tls://host:8786``, ``tcp://[::1]:8786`` or
    ``host:8786`` (no scheme: Dask's default, tcp)."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if rest.startswith("["):  # [IPv6]:port
        return scheme.lower(), rest[1:].partition("]")[0]
    return scheme.lower(), rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


def plain_past_loopback(address: str) -> bool:
    """A plain-TCP Dask address whose host is not loopback (127.0.0.0/8, ::1, localhost). Names
    are not resolved (params load alike on every machine): of names, only localhost is loopback."""
    scheme, host = _address_host(address)
    if not address or scheme != "tcp" or host.lower() == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name, or no host at all
        return True


def address_fault(cfg: EngineParams) -> str | None:
    """What is wrong with cluster.address and cluster.tls on engine dask, in one line, or None.
    The params rule raises it, and so does gnnpipe/runtime/engine.py for an EngineParams built
    without the rules."""
    address, tls = cfg.address, cfg.tls
    if cfg.engine != "dask":
        return None
    for key in TLS_KEYS:
        if "\n" in getattr(tls, key) or "-----BEGIN" in getattr(tls, key):
            return (f"cluster.tls.{key} holds PEM text: give the path of its file (keys and "
                    "certificates stay out of params.yaml and git)")
    scheme, _ = _address_host(address)
    missing = [f"cluster.tls.{key}" for key in TLS_KEYS if not getattr(tls, key)]
    if address and scheme == "tls":
        unset = f"{', '.join(missing)} unset" if len(missing) < len(TLS_KEYS) else "none is set"
        return (f"cluster.address={address!r} is TLS and needs cluster.tls.ca_file, "
                f"cluster.tls.cert_file and cluster.tls.key_file (paths to PEM files, "
                f"docs/scaling.md); {unset}") if missing else None
    if not address:  # the embedded LocalCluster, on 127.0.0.1
        return None
    if scheme != "tcp":
        return (f"cluster.address={address!r}: gnnpipe reaches a scheduler over tls:// (or "
                f"tcp:// on loopback), not {scheme}://")
    if len(missing) < len(TLS_KEYS):
        return (f"cluster.tls is set but cluster.address={address!r} is plain tcp://, which "
                "would ignore it: use the tls:// address of a TLS scheduler")
    if plain_past_loopback(address) and not cfg.allow_insecure:
        return (f"cluster.address={address!r} is plain TCP past loopback: anyone who reaches "
                "that scheduler runs code on every worker; use tls:// with cluster.tls.ca_file, "
                "cluster.tls.cert_file and cluster.tls.key_file (docs/scaling.md), or set "
                "cluster.allow_insecure: true on a network only you can reach")
    return None


def _check_cluster_address(params: Params) -> None:
    """Past loopback, a Dask scheduler is reached over tls:// with mutual authentication: anyone
    who reaches one runs pickled code on every worker (docs/guarantees.md)."""
    fault = address_fault(params.cluster)
    if fault:
        raise ParamsError(fault)


# ----------------------------------------------------------------------------- the one list
# The order decides which message a params file with several faults gets.
def _check_partition_weights(params: Params) -> None:
    """lp balances node counts and counts stored edges: METIS's weights do not apply."""
    cfg = params.partition
    if cfg.method == "lp" and (cfg.node_weight != "none" or cfg.edge_weight != "none"):
        raise ParamsError(f"partition.method='lp' balances node counts and weighs each stored "
                          f"edge once; set partition.node_weight and partition.edge_weight to "
                          f"none (found {cfg.node_weight!r}, {cfg.edge_weight!r})")


RULES = (
    _check_feature_file, _check_typed_source, _check_typed_training, _check_heads,
    _check_rendezvous, _check_sep, _check_residual, _check_layerwise, _check_pairs,
    _check_baseline_models, _check_node_metric, _check_baseline_blocks,
    _check_hard_negatives, _check_seeds, _check_split_mode,
    _check_aggregation, _check_engine, _check_cluster_address, _check_partition_weights,
    _check_embeddings)


def check(params: Params) -> None:
    """Run every rule of ``RULES`` on ``params``; the first that fails raises its ParamsError."""
    for rule in RULES:
        rule(params)
