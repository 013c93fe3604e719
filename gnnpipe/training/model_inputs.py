"""The model inputs of the train and predict stages, for every graph: the graph with the
features the models read, each phase's own message graph as the model takes it, and the
model those inputs fit. Built once from data/prepared, data/split (and data/propagate for
sign); the graph's layout (its types) picks the reader, once, here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from torch import nn

from gnnpipe import io
from gnnpipe.splitting.inputs import (LinkSupervision, TypedSplit, lazy_model_features,
                                     model_features, read_model_typed,
                                     read_typed_link_supervision, whole_features)
from gnnpipe.config import samplers
from gnnpipe.hetero.inputs import phase_inputs
from gnnpipe.hetero.models import build_hetero_model
from gnnpipe.training import distributed, embeddings
from gnnpipe.training.distributed import DistContext
from gnnpipe.training.models import build_model
from gnnpipe.io.common import PHASES
from gnnpipe.training.train import PhaseInput, build_inputs
from gnnpipe.data.graph import EDGE, HOMOGENEOUS, TYPED, edge_type_name, phase_csrs


@dataclass(frozen=True)
class ModelInputs:
    """What a model reads, whatever the graph.

    ``graph``: the ``Graph`` with ``x`` per node type as models read it (a homogeneous graph's
    one type: a ``ModelFeatures`` when its rows are read per batch); ``message_graphs``: phase
    -> Csr (homogeneous layout), or phase -> edge type -> Csr; ``phases``:
    phase -> ``PhaseInput`` of the phases asked for (x, the phase's own edges, the layer-wise
    engine of ``train.inference``); ``num_hops``: sign's K (0 otherwise); ``reads``: the stage
    arguments naming the input folders they came from (a checkpoint is keyed by them). The
    graph's ``layout`` says which models read it; its ``target`` is the type the outputs are of.
    """

    graph: object
    message_graphs: dict
    phases: dict[str, PhaseInput]
    num_hops: int
    reads: tuple[str, ...]
    _build: Callable[[int, str], nn.Module]
    _meta: Callable[[dict], dict]

    def model(self, out_dim: int, out: str = "target") -> nn.Module:
        """A fresh model of ``out_dim`` outputs (``out``: typed models' ``target`` rows or
        ``all`` node types' rows)."""
        return self._build(out_dim, out)

    def meta(self, task_meta: dict) -> dict:
        """model.pt's meta: what rebuilds the model, with the task's ``task_meta``."""
        return self._meta(task_meta)


def read_model_inputs(args, cfg, task: str, *, phases: tuple[str, ...] = PHASES,
                      amp: bool = False, world_size: int = 1) -> ModelInputs:
    """The model inputs of the prepared graph for ``task`` under the train section ``cfg``
    (TrainParams), for ``phases`` only (predict asks for ``test``); ``amp``: feature rows read
    per batch in bfloat16 when stored so (training under autocast). The graph's layout picks
    the models: the flat ones over a homogeneous graph's one relation, else the typed ones;
    ``train.embeddings.types: featureless`` becomes graph.json's featureless types.
    ``world_size`` > 1 (DDP ranks): ``train.inference.mode: auto`` is layer-wise
    (``gnnpipe.training.inference.plan``)."""
    graph = io.read_graph(args.prepared, mmap=True, stored_x=True)
    # train.embeddings.types featureless: the types graph.json lists, named once, here
    cfg = embeddings.resolve(cfg, list(graph.node_types), io.read_featureless(args.prepared))
    return READERS[graph.layout](args, graph, cfg, task, phases, amp, world_size)


def _homogeneous(args, graph, cfg, task: str, phases, amp: bool, world_size: int
                 ) -> ModelInputs:
    stored = graph.target_view().x
    if task == "node" and samplers.out_of_core(cfg):  # rows per batch of the mapped file
        x = lazy_model_features(args, stored, amp=amp)
    else:
        x = model_features(args, stored.float())  # float32 storage: the map itself
    graph = replace(graph, x={graph.target: x})
    graphs = phase_csrs(io.read_typed_message_graphs(args.split, graph, mmap=True)[1])
    num_hops = 0
    # a node loader reads the train edges even for the MLP
    edges = cfg.model != "mlp" or (task == "node" and samplers.SAMPLERS[cfg.sampler].loader
                                   and "train" in phases)
    if samplers.needs(cfg.sampler, "propagate"):  # sign: hops over each phase's own graph
        hops = io.read_propagated(args.propagate)
        num_hops = len(hops["train"]) - 1
        given = build_inputs(x, hops={p: hops[p] for p in phases}, phases=phases)
    elif not edges:
        given = build_inputs(x, phases=phases)
    else:
        given = whole_features(build_inputs(x, message_graphs=graphs, cfg=cfg,
                                            phases=phases, world_size=world_size))
    in_dim = int(x.shape[1])
    num_nodes = {graph.target: graph.num_nodes}  # train.embeddings: a row per node

    def meta(task_meta: dict) -> dict:  # key order as model.pt has always had it
        head = {k: v for k, v in task_meta.items() if k == "task"}
        rest = {k: v for k, v in task_meta.items() if k != "task"}
        return {"model": cfg.model, **head, "in_dim": in_dim, **rest, "num_hops": num_hops,
                **embeddings.meta(cfg, list(num_nodes))}

    return ModelInputs(graph, graphs, given, num_hops,
                       ("prepared", "split", "features", "propagate"),
                       lambda out_dim, out: build_model(cfg.model, in_dim, out_dim, cfg,
                                                        num_hops, num_nodes), meta)


def _typed(args, graph, cfg, task: str, phases, amp: bool, world_size: int) -> ModelInputs:
    typed = read_model_typed(args, graph=graph, mmap=True)  # message graphs: mapped
    graph = typed.graph
    given = phase_inputs(graph, typed.graphs, cfg, phases=phases, world_size=world_size)
    dims = {t: int(x.shape[1]) for t, x in graph.x.items()}
    described = {"model": cfg.model, "target": graph.target,
                 "node_types": ",".join(graph.node_types),
                 "edge_types": ",".join(edge_type_name(e) for e in graph.edge_types),
                 **embeddings.meta(cfg, list(graph.node_types))}
    return ModelInputs(graph, typed.graphs, given, 0,
                       ("prepared", "split", "features"),
                       lambda out_dim, out: build_hetero_model(
                           cfg.model, graph.metadata(), dims, out_dim, graph.target, cfg,
                           out=out, num_nodes=dict(graph.num_nodes_dict)),
                       lambda task_meta: {**described, **task_meta})


def read_supervision(args, inputs: ModelInputs, ctx: DistContext
                     ) -> tuple[tuple | None, LinkSupervision]:
    """The held-out edge type (None: homogeneous layout) and the link supervision in the
    model's output rows (typed: ``to_homogeneous`` ids), with the fixed and hard negatives of
    ``ctx``'s share of the val / test positives only (``distributed.share_rows``: each rank
    scores its share; one process: all of them)."""
    rows = None if ctx.world_size == 1 else partial(distributed.share_rows, ctx=ctx)
    graphs, homogeneous = inputs.message_graphs, inputs.graph.layout == HOMOGENEOUS
    if homogeneous:  # phase -> Csr: its one edge type's
        graphs = {phase: {EDGE: csr} for phase, csr in graphs.items()}
    typed = TypedSplit(inputs.graph, io.read_split_meta(args.split), graphs)
    edge_type, sup = read_typed_link_supervision(args, typed, rows)
    return (None if homogeneous else edge_type), sup


READERS = {HOMOGENEOUS: _homogeneous, TYPED: _typed}
