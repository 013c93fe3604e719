"""Every ``train.sampler`` in one table: where it runs, what it reads, which params section
tunes it and which models it trains. The params checks (``check``, run by
gnnpipe/config/loading.py on every ``Params``), the params docs (gnnpipe/params_doc.py) and the
loader builders (gnnpipe/sampling/builders.py) all read it;
adding a sampler is one entry here and one builder there.

Data only, plus small pure functions over it; no torch, no PyG.
"""

from __future__ import annotations

from dataclasses import dataclass

from gnnpipe.config.errors import ParamsError

HOMOGENEOUS, TYPED = "homogeneous", "typed"  # dataset.layout
# homogeneous node encoders (gnnpipe/training/models.py)
GRAPH_MODELS = ("mlp", "gcn", "sage", "gat", "sep")
TYPED_MODELS = ("sage", "hgt", "rgcn", "mlp")  # typed graphs (gnnpipe/hetero; sage = to_hetero)
# what train.engine: lightning runs besides its samplers (gnnpipe/training/lightning.py)
LIGHTNING_MODELS = GRAPH_MODELS


@dataclass(frozen=True)
class Sampler:
    """One ``train.sampler`` value."""

    name: str
    runs: tuple[tuple[str, str], ...]  # (dataset.task, graph kind) pairs it trains
    ddp: tuple[tuple[str, str], ...]  # of those, the pairs that split across DDP ranks
    models: tuple[str, ...]  # train.model values it trains (also limited by the graph kind)
    engines: tuple[str, ...] = ("plain",)  # train.engine values that run it
    needs: tuple[str, ...] = ()  # upstream stages it reads: partition, propagate
    # time (train.temporal), weights, shards (train.dist.shard), mapped_rows (each batch reads
    # its feature rows from the memory-mapped file: features larger than memory)
    options: tuple[str, ...] = ()
    section: str = ""  # its params section under train ("" = none)
    per_layer: str = ""  # key under train that holds one entry per layer (checked)
    per_layer_what: str = ""  # what one entry is, for the message
    loader: bool = True  # False: no loader, the task steps over the whole graph or row batches
    # what each batch is drawn around: seeds (labelled seed nodes), edges (supervision edges);
    # "" = the whole graph, rows or subgraphs
    around: str = ""
    doc: str = ""  # one line for the params docs


NODE_H, NODE_T, LINK_H, LINK_T = (("node", HOMOGENEOUS), ("node", TYPED), ("link", HOMOGENEOUS),
                                  ("link", TYPED))
SAMPLERS: dict[str, Sampler] = {s.name: s for s in (
    Sampler("full", runs=(NODE_H, NODE_T, LINK_H, LINK_T), ddp=(NODE_H,),
            models=GRAPH_MODELS + ("hgt", "rgcn"), engines=("plain", "lightning"), loader=False,
            doc="whole train-phase graph, one step per epoch (row mini-batches for mlp with "
                "train.batch_size)"),
    Sampler("hgt", runs=(NODE_T,), ddp=(), models=TYPED_MODELS, section="hgt", around="seeds",
            per_layer="hgt.num_samples", per_layer_what="node budget",
            doc="HGT per-type node budgets (typed graphs), loss on the seeds"),
    Sampler("sign", runs=(NODE_H, LINK_H), ddp=(NODE_H,), models=("sign",),
            needs=("propagate",), loader=False,
            doc="rows of precomputed hop features (data/propagate), train.model=sign"),
    Sampler("neighbor", runs=(NODE_H, NODE_T), ddp=(NODE_H, NODE_T),
            models=GRAPH_MODELS + ("hgt", "rgcn"), engines=("plain", "lightning"),
            options=("time", "weights", "mapped_rows"), section="neighbor", around="seeds",
            per_layer="neighbor.num_neighbors", per_layer_what="fan-out",
            doc="seed nodes with sampled in-neighbours per layer, loss on the seeds"),
    Sampler("cluster", runs=(NODE_H,), ddp=(NODE_H,), models=GRAPH_MODELS,
            needs=("partition",), options=("shards",), section="cluster",
            doc="ClusterGCN: joined data/partition parts, loss on their train nodes"),
    Sampler("saint", runs=(NODE_H,), ddp=(NODE_H,), models=GRAPH_MODELS, section="saint",
            doc="GraphSAINT subgraphs, normalised loss on their train nodes"),
    Sampler("shadow", runs=(NODE_H,), ddp=(NODE_H,), models=GRAPH_MODELS, options=("time",),
            section="shadow", around="seeds",
            doc="ShaDow k-hop subgraphs, one per seed, loss at the roots"),
    Sampler("link_neighbor", runs=(LINK_H, LINK_T), ddp=(LINK_H, LINK_T),
            models=GRAPH_MODELS + ("hgt", "rgcn"), section="neighbor", around="edges",
            per_layer="neighbor.num_neighbors", per_layer_what="fan-out",
            doc="supervision edges and one fresh negative each, on sampled neighbourhoods"),
)}


def runs(name: str, task: str, kind: str) -> bool:
    """Whether ``train.sampler: name`` trains ``dataset.task: task`` on a ``kind`` graph."""
    return (task, kind) in SAMPLERS[name].runs


def names(task: str, kind: str, engine: str | None = None) -> tuple[str, ...]:
    """The samplers that train ``task`` on a ``kind`` graph (with ``engine``), table order."""
    return tuple(s.name for s in SAMPLERS.values() if (task, kind) in s.runs
                 and (engine is None or engine in s.engines))


def with_option(option: str) -> tuple[str, ...]:
    """The samplers that take ``option`` (time, weights, shards)."""
    return tuple(s.name for s in SAMPLERS.values() if option in s.options)


def needs(name: str, stage: str) -> bool:
    """Whether ``train.sampler: name`` reads the ``stage`` stage's output (partition,
    propagate)."""
    return stage in SAMPLERS[name].needs


def out_of_core(cfg) -> bool:
    """Whether the train section (TrainParams) reads feature rows per batch / block from the
    mapped file rather than the whole matrix: a sampler whose batches gather their rows
    (``mapped_rows``) on one machine's graph with the plain loop; predict follows train."""
    return ("mapped_rows" in SAMPLERS[cfg.sampler].options
            and cfg.dist.shard != "partition" and cfg.engine == "plain")


def doc_rows() -> list[tuple[str, ...]]:
    """One row per sampler for the params docs: name, where it runs (task/kind), DDP, engines,
    needs / options, params section, models and what it does."""
    def pairs(items):
        return ", ".join(f"{task}/{kind}" for task, kind in items) or "-"

    return [(s.name, pairs(s.runs), pairs(s.ddp), ", ".join(s.engines),
             ", ".join(s.needs + s.options) or "-",
             f"train.{s.section}" if s.section else "-", ", ".join(s.models), s.doc)
            for s in SAMPLERS.values()]


# ---------------------------------------------------------------------------------- checks
def _check_kind(params) -> None:
    """The model and the sampler fit the graph kind (sign only with sign)."""
    cfg, kind = params.train, params.dataset.layout
    model, name = cfg.model, cfg.sampler
    precomputed = {m for s in SAMPLERS.values() if "propagate" in s.needs for m in s.models}
    if (model in precomputed) != needs(name, "propagate"):  # sign with sign, and only so
        raise ParamsError(
            f"train.model={model!r} with train.sampler={name!r}: the sign model trains on "
            "precomputed features, so use train.model=sign together with train.sampler=sign")
    if kind != TYPED and model not in GRAPH_MODELS + tuple(precomputed):
        raise ParamsError(
            f"train.model={model!r} needs a heterogeneous graph (dataset.layout: typed); "
            "for a homogeneous graph use mlp, gcn, sage, gat, sep or sign")
    if kind != TYPED and all(k == TYPED for _, k in SAMPLERS[name].runs):
        raise ParamsError(f"train.sampler={name!r} samples typed node budgets and needs a "
                          "heterogeneous graph (dataset.layout: typed)")
    if kind == TYPED and model not in TYPED_MODELS:
        raise ParamsError(
            f"train.model={model!r} is not available for heterogeneous graphs "
            "(typed graphs); use sage (to_hetero), hgt, rgcn or mlp")


def _check_runs(params) -> None:
    name, task, kind = params.train.sampler, params.dataset.task, params.dataset.layout
    if runs(name, task, kind):
        return
    if kind == TYPED:
        raise ParamsError(f"train.sampler={name!r} is not available for heterogeneous "
                          f"graphs with dataset.task={task} yet; use one of: "
                          f"{', '.join(names(task, kind))}")
    around = SAMPLERS[name].around
    if around:  # drawn around the other task's seeds: name this task's sampler that has seeds
        other = next(s for s in names(task, kind) if SAMPLERS[s].around)
        if around == "edges":
            raise ParamsError(
                f"train.sampler={name!r} samples around supervision edges and needs "
                f"dataset.task=link (found {task!r}); for node classification use "
                f"train.sampler={other}")
        raise ParamsError(
            f"train.sampler={name!r} samples around labelled seed nodes "
            f"(dataset.task=node); for dataset.task={task} use train.sampler={other}")
    raise ParamsError(f"train.sampler={name!r} is not available for dataset.task={task}; "
                      f"use one of: {', '.join(names(task, kind))}")


def _check_per_layer(params) -> None:
    cfg = params.train
    entry = SAMPLERS[cfg.sampler]
    if not entry.per_layer:
        return
    section, key = entry.per_layer.split(".")
    values = getattr(getattr(cfg, section), key)
    if len(values) != cfg.num_layers:
        raise ParamsError(
            f"train.{entry.per_layer}={list(values)} has {len(values)} hops but "
            f"train.num_layers={cfg.num_layers}: give one {entry.per_layer_what} per layer")


def _check_options(params) -> None:
    cfg, column = params.train, params.dataset.edges.weight
    name, by = cfg.sampler, cfg.temporal.by
    if by != "none" and "time" not in SAMPLERS[name].options:
        raise ParamsError(
            f"train.temporal.by={by!r} with train.sampler={name!r}: temporal sampling draws "
            f"seed neighbourhoods, so use train.sampler={' or '.join(with_option('time'))} (or "
            "train.temporal.by: none)")
    if cfg.neighbor.weighted and ("weights" not in SAMPLERS[name].options or not column
                                  or by != "none"):
        raise ParamsError(
            f"train.neighbor.weighted=true draws in-edges in proportion to the edge table's "
            f"weight column: it needs train.sampler={'/'.join(with_option('weights'))} (found "
            f"{name!r}), dataset.edges.weight set (found {column!r}) and train.temporal.by=none "
            f"(found {by!r}); or set train.neighbor.weighted: false")
    if cfg.dist.shard == "partition" and "shards" not in SAMPLERS[name].options:
        raise ParamsError(
            f"train.dist.shard='partition' with train.sampler={name!r}: a rank holding only "
            "its partition shards trains on ClusterGCN batches, so use train.sampler="
            f"{'/'.join(with_option('shards'))}, or train.dist.shard: none (neighbor samplers "
            "read the shared memory-mapped files on every rank)")


def _check_ddp(params) -> None:
    cfg, task, kind = params.train, params.dataset.task, params.dataset.layout
    if cfg.dist.world_size == 1 or (task, kind) in SAMPLERS[cfg.sampler].ddp:
        return
    splitting = [s.name for s in SAMPLERS.values() if (task, kind) in s.ddp]
    if kind == TYPED:
        raise ParamsError(f"train.dist.nproc/train.dist.nnodes > 1 on heterogeneous graphs with "
                          f"dataset.task={task} needs train.sampler={'/'.join(splitting)} "
                          f"(found {cfg.sampler!r}): only its seeds are split across ranks")
    raise ParamsError(f"train.dist.nproc/train.dist.nnodes > 1 with dataset.task={task} needs "
                      f"train.sampler={'/'.join(splitting)} (found {cfg.sampler!r}): the "
                      "full-graph step has no batches to split across ranks")


def _check_lightning(params) -> None:
    """What ``train.engine: lightning`` runs (gnnpipe/training/lightning.py), named when it is not."""
    cfg, task = params.train, params.dataset.task
    if cfg.engine != "lightning":
        return
    samplers = names("node", HOMOGENEOUS, "lightning")
    found = []
    if task != "node":
        found.append(f"dataset.task={task!r}")
    if params.dataset.layout == TYPED:
        found.append("a typed graph")
    if cfg.sampler not in samplers:
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
            f"(dataset.task=node) with train.sampler {' or '.join(samplers)}, "
            f"train.model {' | '.join(LIGHTNING_MODELS)}, without train.temporal, on one "
            f"process (train.dist.nproc=1, train.dist.nnodes=1); found {'; '.join(found)}. Use "
            "train.engine=plain for the rest")


def _check_cluster_batch(params) -> None:
    """A ClusterGCN batch joins parts of data/partition, so it cannot ask for more than exist."""
    cfg = params.train
    if needs(cfg.sampler, "partition") and (
            cfg.cluster.parts_per_batch > params.partition.num_parts):
        raise ParamsError(f"train.cluster.parts_per_batch={cfg.cluster.parts_per_batch} exceeds "
                          f"partition.num_parts={params.partition.num_parts}: a batch joins "
                          "that many parts; lower the first or raise the second")
    if cfg.cluster.keep_inter_cluster_edges and cfg.dist.shard == "partition":
        raise ParamsError("train.cluster.keep_inter_cluster_edges=true needs the whole train "
                          "graph; use train.dist.shard: none")


# ----------------------------------------------------------------------------- the one list
# The order decides which message a params file with several sampler faults gets.
RULES = (_check_kind, _check_runs, _check_ddp, _check_per_layer, _check_options, _check_lightning,
         _check_cluster_batch)


def check(params) -> None:
    """The params rules that depend on ``train.sampler`` (a ``gnnpipe.config.Params``): where the
    sampler runs, which models it trains, its per-layer list, options, DDP and engine. Raises
    one-line ``ParamsError``."""
    for rule in RULES:
        rule(params)
