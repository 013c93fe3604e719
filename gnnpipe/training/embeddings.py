"""Learnable node embeddings (``train.embeddings``): one trained row per node of the chosen
node types, looked up by the global node ids each batch carries and put beside (``concat``)
or instead of (``alone``) the type's features as the model's first-layer input.
``types: featureless`` names the types graph.json lists as having had no feature columns
(``resolve``, once, where the model inputs are read).

``NodeInputs`` owns the tables and turns (feature rows, global node ids) into input rows; the
homogeneous models (gnnpipe/training/models.py) and the typed ones (gnnpipe/hetero/models.py)
hold one as ``model.node_inputs`` and call ``input_rows`` at the top of their forward. A sampled
batch passes its ``n_id`` (``gnnpipe.training.models.trim_kwargs``); a whole-graph forward
passes none and reads every row in id order. ``input_table`` gives the whole graph's input rows
in eval mode, what layer-wise inference reads in place of the features.

Trained sparsely: each table is ``nn.Embedding(sparse=True)``, so a step's gradient holds only
the rows the batch gathered, and ``optimizer`` steps those rows with lazy Adam (the arithmetic
and state of ``torch.optim.SparseAdam``) beside Adam for the dense weights (one
``RowSparseAdam``: the loop and Lightning take one optimizer). The two moment tables are dense
(N, D) but only the batch's rows are read and written per step, so a step costs O(rows x D),
not O(N x D). No weight decay on the rows.

DDP: the tables are kept out of DDP (``_ddp_params_and_buffers_to_ignore``); ``RowSparseAdam``
averages their row gradients over the ranks itself (all_gather of each rank's rows and values,
summed and divided by the world size, the same arithmetic on every rank), so every rank applies
the same update and the tables stay identical without being broadcast. DDP would all-reduce
sparse gradients on gloo (checked: the union of the rows, averaged), but NCCL has no sparse
all-reduce; this path runs on both.

A node without a trained row: ``trained`` (bool (N_t,), saved in model.pt) marks the rows
whose averaged gradient was ever non-zero. In eval mode every other row (a node no training
step reached: an inductive split's unseen nodes, an isolated node, a new graph's unknown node)
reads the mean of the type's trained rows, never a silent zero; a type none of whose rows was
ever trained keeps its initial rows (no training step depended on them). ``untrained_rows``
counts them; ``remap_rows`` points a new graph's nodes at trained rows (-1: unknown).

Memory per node and rank: D float32 (the row) + 2 D float32 (SparseAdam's moments) + 1 byte
(``trained``), plus D float32 for the loop's copy of the best weights: about 16 D bytes.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from gnnpipe.training.distributed import SINGLE, DistContext


class NodeTable(nn.Module):
    """One node type's rows: ``embedding.weight`` (N_t, D) with sparse gradients and the
    ``trained`` mask (N_t,) bool. ``forward(n_id, count)`` -> (len(n_id) or count, D)."""

    def __init__(self, num_nodes: int, dim: int):
        super().__init__()
        self.embedding = nn.Embedding(num_nodes, dim, sparse=True)
        self.register_buffer("trained", torch.zeros(num_nodes, dtype=torch.bool))
        # remap_rows: node of the graph being scored -> row of this table (-1: none); not saved
        self.rows: torch.Tensor | None = None
        self._fallback: tuple | None = None  # (weights' version key, (D,) fallback row)

    @property
    def num_nodes(self) -> int:
        return self.embedding.num_embeddings

    def forward(self, n_id: torch.Tensor | None, count: int) -> torch.Tensor:
        weight = self.embedding.weight
        if n_id is None:  # a whole-graph forward: rows 0..count-1 in order
            size = self.num_nodes if self.rows is None else self.rows.numel()
            if count != size:
                raise ValueError(f"train.embeddings: the model holds {size} embedding rows of "
                                 f"this node type but the graph has {count} nodes; point a new "
                                 f"graph's nodes at trained rows with gnnpipe.training."
                                 f"embeddings.remap_rows")
            ids = torch.arange(count, device=weight.device)
        else:
            ids = n_id.to(weight.device)
        if self.rows is not None:
            ids = self.rows.to(weight.device)[ids]
        if self.training:  # gathered with a sparse gradient: only these rows are stepped
            if bool((ids < 0).any()):
                raise ValueError("train.embeddings: a training batch holds nodes without an "
                                 "embedding row")
            return self.embedding(ids)
        safe = ids.clamp(min=0)
        known = (ids >= 0) & self.trained[safe]
        out = F.embedding(safe, weight)  # (n, D)
        if bool(known.all()):
            return out
        fallback = self.fallback()
        return out if fallback is None else torch.where(known.unsqueeze(1), out, fallback)

    def fallback(self) -> torch.Tensor | None:
        """(D,) the mean of the trained rows (cached until the weights change), None when no
        row was trained."""
        weight, trained = self.embedding.weight, self.trained
        key = (weight.data_ptr(), weight._version, trained.data_ptr(), trained._version)
        if self._fallback is None or self._fallback[0] != key:
            with torch.no_grad():
                value = weight[trained].mean(0) if bool(trained.any()) else None
            self._fallback = (key, value)
        return self._fallback[1]


class NodeInputs(nn.Module):
    """The model's input rows: node type -> ``NodeTable`` for ``types``, each of ``dim``;
    ``alone``: the rows replace the type's features, else they are concatenated after them.
    ``forward(x, n_id)``: x (n, F) (the one type of a homogeneous model) or type -> (n_t, F_t),
    ``n_id`` the rows' global ids ((n,) or type -> (n_t,)), None for a whole graph in id order;
    out: (n, width) or type -> (n_t, width_t) (``width``)."""

    def __init__(self, num_nodes: dict[str, int], dim: int, types: list[str], alone: bool):
        super().__init__()
        self.types, self.dim, self.alone = list(types), dim, alone
        self.tables = nn.ModuleList(NodeTable(num_nodes[t], dim) for t in self.types)

    def table(self, node_type: str) -> NodeTable | None:
        return self.tables[self.types.index(node_type)] if node_type in self.types else None

    def width(self, node_type: str, features: int) -> int:
        """Input width of ``node_type`` whose features are ``features`` wide."""
        if node_type not in self.types:
            return features
        return self.dim if self.alone else features + self.dim

    def rows(self, node_type: str, x: torch.Tensor, n_id: torch.Tensor | None) -> torch.Tensor:
        """Input rows (n, width) of ``node_type`` from its feature rows ``x`` (n, F)."""
        table = self.table(node_type)
        if table is None:
            return x
        emb = table(n_id, int(x.shape[0]))  # (n, D)
        return emb if self.alone else torch.cat([x, emb.to(x.dtype)], dim=1)

    def forward(self, x, n_id=None):
        if isinstance(x, dict):
            return {t: self.rows(t, v, None if n_id is None else n_id.get(t))
                    for t, v in x.items()}
        (node_type,) = self.types  # a homogeneous model's one type
        return self.rows(node_type, x, n_id)


def resolve(cfg, node_types: list[str], featureless: list[str]):
    """``cfg`` (TrainParams) with ``train.embeddings.types: featureless`` replaced by the
    graph's ``featureless`` types (graph.json's list, node-type order; a homogeneous graph's
    one type when it is listed); ``cfg`` itself for any other choice. Called once, where the
    model inputs are read, so the builders and model.pt's meta see the resolved names. A graph
    whose ``node_types`` all had feature columns is refused in one line."""
    emb = getattr(cfg, "embeddings", None)
    if emb is None or emb.dim == 0 or emb.types != "featureless":
        return cfg
    if not featureless:
        raise ValueError(f"train.embeddings.types='featureless', but every node type of the "
                         f"prepared graph ({', '.join(map(repr, node_types))}) had feature "
                         f"columns (graph.json lists no featureless type); use "
                         f"train.embeddings.types: all or name the types")
    return replace(cfg, embeddings=replace(emb, types=tuple(featureless)))


def _types(cfg, node_types: list[str]) -> list[str]:
    """The node types that get a table under ``cfg`` (EmbeddingsParams), ``resolve``d."""
    # resolve() runs where the model inputs are read, before any builder
    assert cfg.types != "featureless", "train.embeddings.types: featureless was not resolved"
    return list(node_types) if cfg.types == "all" else list(cfg.types)


def node_inputs(num_nodes: dict[str, int] | None, cfg) -> NodeInputs | None:
    """The ``NodeInputs`` of ``cfg.embeddings`` (TrainParams) over node type -> node count, or
    None: embeddings off (``dim`` 0, a section without them, or no node counts: the baseline).
    Draws the rows from torch's global RNG (N(0, 1), ``nn.Embedding``'s): call under
    ``fork_rng``, as the model builders do."""
    cfg = getattr(cfg, "embeddings", None)
    if num_nodes is None or cfg is None or cfg.dim == 0:
        return None
    types = _types(cfg, list(num_nodes))
    unknown = [t for t in types if t not in num_nodes]
    if unknown:
        raise ValueError(f"train.embeddings.types names {', '.join(map(repr, unknown))}; the "
                         f"graph's node types are {', '.join(map(repr, num_nodes))}")
    return NodeInputs(num_nodes, cfg.dim, types, cfg.combine == "alone")


def attach(model: nn.Module, inputs: NodeInputs | None) -> nn.Module:
    """``model`` holding ``inputs`` as ``model.node_inputs``, its tables kept out of DDP
    (``RowSparseAdam`` averages their row gradients); nothing is added when ``inputs`` is None,
    so a model without embeddings keeps its state dict."""
    if inputs is None:
        return model
    model.node_inputs = inputs
    model._ddp_params_and_buffers_to_ignore = [
        name for name, _ in (*model.named_parameters(), *model.named_buffers())
        if name.startswith("node_inputs.")]
    return model


def input_rows(model: nn.Module, x, n_id=None):
    """``model``'s first-layer input from feature rows ``x`` and their global ids ``n_id``
    (``NodeInputs.forward``); ``x`` itself for a model without embeddings."""
    inputs = getattr(model, "node_inputs", None)
    return x if inputs is None else inputs(x, n_id)


class InputRows:
    """Eval-mode input rows of a ``ModelFeatures``-like ``x`` (rows read per request), row by
    row: ``rows[index]`` (int64 ids or a slice) -> (B, width), as ``ModelFeatures`` indexes."""

    def __init__(self, inputs: NodeInputs, node_type: str, x):
        self.inputs, self.node_type, self.x = inputs, node_type, x
        self.shape = torch.Size([int(x.shape[0]), inputs.width(node_type, int(x.shape[1]))])

    def __len__(self) -> int:
        return self.shape[0]

    @torch.no_grad()
    def __getitem__(self, index) -> torch.Tensor:
        ids = (torch.arange(self.shape[0])[index] if isinstance(index, slice) else index)
        was = self.inputs.training
        self.inputs.eval()
        try:
            return self.inputs.rows(self.node_type, self.x[index].float(), ids)
        finally:
            self.inputs.train(was)

    def float(self) -> torch.Tensor:
        return self[0:self.shape[0]]


class _InputDict(dict):
    """A typed graph's input table (type -> rows), marked so ``input_table`` passes it through."""


_MARK = "_gnnpipe_input_table"  # set on a tensor input_table built


@torch.no_grad()
def input_table(model: nn.Module, x):
    """Every node's eval-mode input rows for ``model`` (trained rows, the fallback for the
    others): x (N, F) -> (N, width), or type -> (N_t, F_t) -> type -> (N_t, width_t); a
    ``ModelFeatures`` gives ``InputRows`` (read per request). What layer-wise inference reads
    instead of the features; ``x`` itself without embeddings, and an input table passes
    through (calling twice is harmless)."""
    inputs = getattr(model, "node_inputs", None)
    if inputs is None or isinstance(x, (_InputDict, InputRows)) or getattr(x, _MARK, False):
        return x
    was = inputs.training
    inputs.eval()
    try:
        if isinstance(x, dict):
            return _InputDict({t: _table_rows(inputs, t, v) for t, v in x.items()})
        (node_type,) = inputs.types
        return _table_rows(inputs, node_type, x)
    finally:
        inputs.train(was)


def _table_rows(inputs: NodeInputs, node_type: str, x):
    if inputs.table(node_type) is None:
        return x
    if not isinstance(x, torch.Tensor):
        return InputRows(inputs, node_type, x)
    out = inputs.rows(node_type, x.float(), None)
    setattr(out, _MARK, True)
    return out


def tables(model: nn.Module) -> dict[str, NodeTable]:
    """Node type -> ``NodeTable`` of ``model`` (empty without embeddings)."""
    inputs = getattr(model, "node_inputs", None)
    return {} if inputs is None else dict(zip(inputs.types, inputs.tables))


def untrained_rows(model: nn.Module) -> dict[str, int]:
    """Node type -> rows no training step reached (in eval mode they read the mean of the
    type's trained rows)."""
    return {t: int((~table.trained).sum()) for t, table in tables(model).items()}


def remap_rows(model: nn.Module, rows: dict[str, torch.Tensor | None]) -> None:
    """Score another graph with ``model``: ``rows[t]`` int64 (M_t,) is the trained table's row
    of each of that graph's type-``t`` nodes (matched by the user's ids), -1 for a node the
    table has no row of (it reads the mean of trained rows); None restores the table's own ids."""
    for t, table in tables(model).items():
        given = rows.get(t)
        if given is not None and (given.dtype != torch.int64 or given.dim() != 1 or bool(
                (given >= table.num_nodes).any() or (given < -1).any())):
            raise ValueError(f"remap_rows: node type {t!r} needs int64 rows in [-1, "
                             f"{table.num_nodes})")
        table.rows = given


def meta(cfg, node_types: list[str]) -> dict:
    """What model.pt's meta says of ``cfg.embeddings`` (TrainParams) over the graph's
    ``node_types``: ``embeddings`` "type:width,..." and ``embeddings_combine``; {} when off, so
    a model without embeddings keeps its meta."""
    cfg = getattr(cfg, "embeddings", None)
    if cfg is None or cfg.dim == 0:
        return {}
    types = _types(cfg, node_types)
    return {"embeddings": ",".join(f"{t}:{cfg.dim}" for t in types),
            "embeddings_combine": cfg.combine}


def summary(state_dict: dict, meta: dict) -> dict:
    """What train.json and the report say of a trained model's embeddings: model.pt's ``meta``
    entries (``meta``) and, per type, the rows no training step reached (they read the mean of
    trained rows), from the ``trained`` masks of ``state_dict``; {} without embeddings."""
    if "embeddings" not in meta:
        return {}
    types = [entry.rsplit(":", 1)[0] for entry in meta["embeddings"].split(",")]
    untrained = {t: int((~state_dict[f"node_inputs.tables.{i}.trained"]).sum())
                 for i, t in enumerate(types)}
    return {"embeddings": meta["embeddings"], "embeddings_combine": meta["embeddings_combine"],
            "embedding_rows_untrained": untrained}


# ---------------------------------------------------------------------------------- optimizer
def optimizer(model: nn.Module, cfg, ctx: DistContext = SINGLE) -> torch.optim.Optimizer:
    """The optimizer of ``model`` (the user's module, before any DDP wrapper) with ``cfg.lr``
    and ``cfg.weight_decay`` (FitParams): Adam over every parameter, exactly as before, for a
    model without embeddings; else ``RowSparseAdam`` (Adam for the dense weights, lazy Adam for
    the table rows, their gradients averaged over ``ctx``'s ranks)."""
    found = list(tables(model).values())
    if not found:
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    return RowSparseAdam(model, found, cfg.lr, cfg.weight_decay, ctx)


class RowSparseAdam(torch.optim.Optimizer):
    """Adam (with ``weight_decay``) over ``model``'s dense parameters and lazy Adam over the
    rows of ``tables`` (``torch.optim.SparseAdam``'s arithmetic and state: ``step``,
    ``exp_avg``, ``exp_avg_sq``; each step reads and writes only the rows of the gradient), as
    one optimizer: ``param_groups`` are the dense group then the tables' group, ``state`` is
    shared, so ``state_dict`` / ``load_state_dict`` / ``zero_grad`` and a ``GradScaler`` see one
    optimizer. ``step`` first averages the tables' row gradients over ``ctx``'s ranks and marks
    the rows whose gradient is non-zero as trained."""

    def __init__(self, model: nn.Module, tables: list[NodeTable], lr: float,
                 weight_decay: float, ctx: DistContext = SINGLE):
        sparse = {id(t.embedding.weight) for t in tables}
        dense = [p for p in model.parameters() if id(p) not in sparse]
        self._dense = torch.optim.Adam(dense, lr=lr, weight_decay=weight_decay)
        rows = {"params": [t.embedding.weight for t in tables], "lr": lr,
                "betas": (0.9, 0.999), "eps": 1e-8}  # SparseAdam's defaults
        super().__init__(self._dense.param_groups + [rows], {})
        self._tables, self._ctx = tables, ctx
        self._link()

    def _link(self) -> None:
        """The inner Adam steps this optimizer's first group and state (after a load too)."""
        self._dense.param_groups = self.param_groups[:1]
        self._dense.state = self.state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._link()

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:  # Lightning's automatic optimization passes the step's closure
            with torch.enable_grad():
                loss = closure()
        for table in self._tables:
            weight = table.embedding.weight
            grad = _average_rows(weight.grad, weight, self._ctx)
            weight.grad = grad
            if grad is not None:  # rows whose averaged gradient moved: trained from now on
                rows = grad.indices()[0]
                table.trained[rows[grad.values().ne(0).any(dim=1)]] = True
        self._dense.step()
        group = self.param_groups[1]
        for param in group["params"]:
            if param.grad is not None:
                _adam_rows(param, param.grad, self.state[param], group)
        return loss


def _adam_rows(param: torch.Tensor, grad: torch.Tensor, state: dict, group: dict) -> None:
    """One lazy Adam step of the rows of ``grad`` (coalesced sparse (N, D)) of ``param``: the
    arithmetic of ``torch.optim.SparseAdam`` (moments and bias correction per row), as dense
    (rows, D) ops: gather the rows' moments, update, write back, add the step."""
    if not state:  # SparseAdam's state: dense moments, only the gradient's rows move
        state.update(step=0, exp_avg=torch.zeros_like(param), exp_avg_sq=torch.zeros_like(param))
    state["step"] += 1
    (beta1, beta2), eps, lr = group["betas"], group["eps"], group["lr"]
    rows, values = grad.indices()[0], grad.values()  # (R,), (R, D)
    mean = state["exp_avg"].index_select(0, rows).mul_(beta1).add_(values, alpha=1 - beta1)
    square = state["exp_avg_sq"].index_select(0, rows).mul_(beta2).addcmul_(
        values, values, value=1 - beta2)
    state["exp_avg"].index_copy_(0, rows, mean)
    state["exp_avg_sq"].index_copy_(0, rows, square)
    step = state["step"]
    size = lr * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
    param.index_add_(0, rows, mean.div_(square.sqrt_().add_(eps)), alpha=-size)


def _average_rows(grad: torch.Tensor | None, weight: torch.Tensor,
                  ctx: DistContext) -> torch.Tensor | None:
    """A table's sparse gradient coalesced (one entry per row) and, under DDP, averaged over
    the ranks: every rank's (rows, values) gathered in rank order, summed per row and divided
    by the world size (DDP's mean). Every rank calls for every table, a None gradient as no
    rows, so the collectives line up. None when no rank has a row."""
    if ctx.world_size == 1:
        return None if grad is None else grad.coalesce()
    dim = weight.shape[1]
    if grad is None:
        rows = torch.empty(0, dtype=torch.int64, device=weight.device)
        values = torch.empty(0, dim, dtype=weight.dtype, device=weight.device)
    else:
        grad = grad.coalesce()
        rows, values = grad.indices()[0], grad.values()
    sizes = [torch.zeros(1, dtype=torch.int64, device=weight.device)
             for _ in range(ctx.world_size)]
    dist.all_gather(sizes, torch.tensor([rows.numel()], device=weight.device))
    most = int(max(int(s) for s in sizes))
    if most == 0:
        return None
    pad = most - rows.numel()  # all_gather wants equal shapes
    rows_all = [torch.empty(most, dtype=torch.int64, device=weight.device)
                for _ in range(ctx.world_size)]
    values_all = [torch.empty(most, dim, dtype=values.dtype, device=weight.device)
                  for _ in range(ctx.world_size)]
    dist.all_gather(rows_all, F.pad(rows, (0, pad)))
    dist.all_gather(values_all, F.pad(values, (0, 0, 0, pad)))
    rows = torch.cat([r[:int(s)] for r, s in zip(rows_all, sizes)])
    values = torch.cat([v[:int(s)] for v, s in zip(values_all, sizes)])
    total = torch.sparse_coo_tensor(rows.unsqueeze(0), values, weight.shape,
                                    check_invariants=False).coalesce()  # rows < N by gather
    return (total / ctx.world_size).coalesce()
