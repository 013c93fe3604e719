"""Epoch time of typed GraphSAGE mini-batch training: gnnpipe's typed path vs PyG's HeteroData
``NeighborLoader`` on torch-sparse, same run, same graph, seeds, fan-outs and initial weights.

    /work/peer-venv/bin/python -m bench.typed_epoch --cache DIR            # ~0.78M nodes
    python -m bench.typed_epoch --scale 0.05 --seeds 2048                  # quick, gnnpipe only

The graph has OGB-MAG's shape (``MAG``: paper, author, institution, field_of_study; writes,
cites, has_topic, affiliated_with) at ``--scale`` of its sizes, every relation stored with its
reverse as PyG's MAG examples do (``T.ToUndirected(merge=True)``: ``cites`` both ways, the
others with a ``rev_`` type), ``--features`` float32 features on every type (as
``OGB_MAG(preprocess="metapath2vec")``), ``--classes`` paper classes, log-normal endpoint
skew. Every row trains the same model: gnnpipe's ``train.model: sage`` on a typed graph
(``gnnpipe.hetero.models.HeteroModel``: one ``Linear`` per node type to hidden 64, ReLU,
dropout, then PyG's ``to_hetero(GraphSAGE(64, 64, 2 layers, classes), aggr="sum")``; Adam lr
0.01, weight decay 5e-4, dropout 0.5), from the same initial weights, on ``--seeds`` fixed
paper seeds per epoch, fan-out ``--fanout`` for every edge type, batch ``--batch-size``:

- ``gnnpipe fit``: what ``train.sampler: neighbor`` runs on a typed graph:
  ``gnnpipe.training.train.fit`` over ``gnnpipe.sampling.builders.typed_neighbor_batches``
  (``HeteroNeighborSampler`` in PyG's ``NodeLoader``), its epoch time fit's own
  ``train_seconds``, split by ``bench.epoch_steps.StepClock`` (``timed_fit``); evaluation
  stubbed out.
- ``PyG recipe (torch-sparse)``: PyG's ``NeighborLoader(data, num_neighbors, batch_size,
  input_nodes=("paper", seeds), shuffle=True)`` on the same ``HeteroData``, the model on
  ``batch.edge_index_dict`` (PyG's ``examples/hetero/to_hetero_mag.py`` loop).
- ``PyG best (torch-sparse, trim, adj_t)``: PyG's fastest documented CPU configuration for
  typed graphs, ``examples/hetero/hierarchical_sage.py --use-sparse-tensor``: the loader with
  ``transform=T.ToSparseTensor()`` (torch-sparse ``spmm`` mean per edge type) and a
  ``HeteroConv`` of ``SAGEConv`` per layer (``aggr="sum"``: ``to_hetero(GraphSAGE)``'s sum)
  trimmed with ``trim_to_layer``. ``to_hetero`` models cannot trim (their forward drops the
  per-hop keywords: "'num_sampled_nodes_per_hop' needs to be given"), so this row's model is
  ``HierarchicalSage``: the same weights in that layout. torch-sparse returns no per-hop
  counts; ``hetero_hop_counts`` reads them off its breadth-first output (timed with the
  sampler).
- ``gnnpipe fit, untrimmed``: the same ``fit`` over batches stripped of their per-hop counts,
  i.e. the typed step before it trimmed (every layer on the whole sampled subgraph).
- ``PyG recipe loop on gnnpipe's sampler``: the recipe's loop over gnnpipe's typed loader.

Rows run in interleaved rounds (odd rounds reversed), ``loss`` the epoch's mean train loss,
``probe`` the train loss after the epoch on one fixed sampled batch of 2,048 seeds (eval mode,
untrimmed, the same subgraph for every row). ``--check`` first compares, on a few batches of
the peer loaders, the trimmed best model's seed logits with the untrimmed model's (equal when
``hetero_hop_counts`` is right).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `gnnpipe` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch import nn
from torch_geometric.nn import HeteroConv

from bench.common import machine, print_machine
from bench.epoch_steps import (HEADER, finish, interleave, plain_epoch, record, summarize,
                               timed_fit)
from bench.train_epoch import NoEvaluation, peer_library
from gnnpipe.config import CheckpointParams, NeighborParams, TrainParams
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.data.graph import ROLE_CODES, Csr, Graph, edge_type_name
from gnnpipe.hetero.loader import hetero_data
from gnnpipe.hetero.models import build_hetero_model
from gnnpipe.sampling.batch import Batches, typed_edges
from gnnpipe.sampling.builders import typed_neighbor_batches
from gnnpipe.training.loop import LoopOptions
from gnnpipe.training.train import batch_output

TARGET = "paper"
# OGB-MAG (ogbn-mag): nodes per type, and (src, relation, dst) -> edges
MAG_NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740,
             "field_of_study": 59_965}
MAG_EDGES = {("author", "affiliated_with", "institution"): 1_043_998,
             ("author", "writes", "paper"): 7_145_660,
             ("paper", "cites", "paper"): 5_416_271,
             ("paper", "has_topic", "field_of_study"): 7_505_078}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=0.4,
                        help="fraction of OGB-MAG's node and edge counts (0.4: ~0.78M nodes)")
    parser.add_argument("--features", type=int, default=128, help="features of every type")
    parser.add_argument("--classes", type=int, default=349, help="paper classes (MAG: 349)")
    parser.add_argument("--skew", type=float, default=1.0,
                        help="sigma of the log-normal endpoint propensities")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=None,
                        help="folder to keep the built graph in (reused when arguments match)")
    parser.add_argument("--fanout", default="15,10", help="comma-separated, one per layer")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seeds", type=int, default=10_240, help="train papers per epoch")
    parser.add_argument("--epochs", type=int, default=1, help="epochs per row and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--rows", default="all",
                        help="comma-separated row keys (fit,fit_untrimmed,peer,peer_best,"
                             "plain) or all")
    parser.add_argument("--check", action="store_true",
                        help="first check hetero_hop_counts through the trimmed forward")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------ graph
def _ends(rng: np.random.Generator, n: int, size: int, sigma: float) -> np.ndarray:
    """``size`` node ids in ``[0, n)`` drawn with log-normal propensities (sigma 0: uniform)."""
    if sigma <= 0:
        return rng.integers(0, n, size=size)
    cdf = np.cumsum(np.exp(sigma * rng.standard_normal(n)))
    return np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1]), n - 1)


def mag_like_graph(scale: float, features: int, classes: int, skew: float, seed: int) -> Graph:
    """A typed ``Graph`` of OGB-MAG's shape at ``scale`` (module docstring): papers labelled
    (class means + noise features), every relation and its reverse stored."""
    rng = np.random.default_rng(seed)
    n = {t: max(2, int(round(c * scale))) for t, c in MAG_NODES.items()}
    y = rng.integers(0, classes, size=n[TARGET])
    means = rng.standard_normal((classes, features)).astype(np.float32)
    x = {t: rng.standard_normal((k, features), dtype=np.float32) for t, k in n.items()}
    x[TARGET] += means[y]
    csr, reverse = {}, {}
    for (s, rel, d), count in MAG_EDGES.items():
        m = max(1, int(round(count * scale)))
        src, dst = _ends(rng, n[s], m, skew), _ends(rng, n[d], m, skew)
        if s == d:  # cites: one symmetric type
            both = (np.concatenate([src, dst]), np.concatenate([dst, src]))
            csr[(s, rel, d)] = csr_from_edges(*both, n[d], n[s])
            reverse[(s, rel, d)] = (s, rel, d)
            continue
        back = (d, f"rev_{rel}", s)
        csr[(s, rel, d)] = csr_from_edges(src, dst, n[d], n[s])
        csr[back] = csr_from_edges(dst, src, n[s], n[d])
        reverse[(s, rel, d)], reverse[back] = back, (s, rel, d)
    return Graph(x={t: torch.from_numpy(v) for t, v in x.items()}, csr=csr, target=TARGET,
                 y=torch.from_numpy(y), num_classes=classes, reverse=reverse,
                 link_edge_type=("author", "writes", "paper"))


def load_graph(args: argparse.Namespace) -> Graph:
    """``mag_like_graph`` of the arguments, through ``--cache`` when given."""
    key = (f"mag_s{args.scale:g}_f{args.features}_c{args.classes}_k{args.skew:g}"
           f"_seed{args.seed}.pt")
    path = None if args.cache is None else Path(args.cache) / key
    if path is not None and path.exists():
        p = torch.load(path, weights_only=False)
        return Graph(x=p["x"], csr={e: Csr(*v) for e, v in p["csr"].items()}, target=TARGET,
                     y=p["y"], num_classes=args.classes, reverse=p["reverse"],
                     link_edge_type=("author", "writes", "paper"))
    graph = mag_like_graph(args.scale, args.features, args.classes, args.skew, args.seed)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save({"x": graph.x, "y": graph.y, "reverse": graph.reverse,
                    "csr": {e: (c.indptr, c.indices) for e, c in graph.csr.items()}}, tmp)
        os.replace(tmp, path)
    return graph


def describe(graph: Graph) -> str:
    nodes = ", ".join(f"{v.shape[0]:,} {t}" for t, v in graph.x.items())
    edges = sum(c.num_edges for c in graph.csr.values())
    return (f"{nodes} ({graph.num_nodes:,} nodes); {edges:,} directed edges in "
            f"{len(graph.csr)} edge types; {graph.x[TARGET].shape[1]} float32 features")


# ------------------------------------------------------------------------------- the peer
def hetero_hop_counts(out, hops: int, seed_type: str):
    """``out`` (torch-sparse's typed ``HeteroSamplerOutput``) with the per-hop counts pyg-lib
    would return: ``num_sampled_nodes[t]`` (hops + 1,) and ``num_sampled_edges[e]`` (hops,).
    torch-sparse samples hop by hop: in hop k every edge type ``(s, r, d)`` draws in-edges of
    the ``d`` nodes first seen in hop k - 1, targets ascending (``col``), and new ``s`` nodes
    get the next local ids of their type; so the hop's edges of a type are a
    ``searchsorted`` range of ``col`` and a type's new nodes end at its largest source."""
    seeds = int(out.metadata[0].numel())
    end = {t: (seeds if t == seed_type else 0) for t in out.node}  # nodes seen so far
    nodes = {t: [v] for t, v in end.items()}
    edges: dict = {e: [] for e in out.col}
    first = dict.fromkeys(out.col, 0)  # each edge type's first edge of the hop
    for _ in range(hops):
        seen = dict(end)
        for e, col in out.col.items():
            last = int(torch.searchsorted(col, end[e[2]]))  # edges into [.., end of d)
            if last > first[e]:
                seen[e[0]] = max(seen[e[0]], int(out.row[e][first[e]:last].max()) + 1)
            edges[e].append(last - first[e])
            first[e] = last
        for t in nodes:
            nodes[t].append(seen[t] - end[t])
        end = seen
    assert all(end[t] == out.node[t].numel() for t in end), "not a breadth-first sample"
    assert all(first[e] == out.col[e].numel() for e in first), "not a breadth-first sample"
    out.num_sampled_nodes, out.num_sampled_edges = nodes, edges
    return out


class HierarchicalSage(nn.Module):
    """PyG's ``examples/hetero/hierarchical_sage.py`` model holding a gnnpipe ``HeteroModel``'s
    weights (copies): its per-type input maps, ReLU and dropout, then per layer
    ``trim_to_layer`` and a ``HeteroConv`` of its ``SAGEConv`` s summed per destination type
    (``to_hetero``'s ``aggr="sum"``), ReLU and dropout between layers. ``forward(x_dict,
    adj_dict, num_sampled_nodes_dict, num_sampled_edges_dict)`` -> the target type's rows
    (counts None: untrimmed)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.target, self.p = model.target, model.dropout.p
        self.inputs = copy.deepcopy(model.inputs)
        self.convs = nn.ModuleList(
            HeteroConv({e: copy.deepcopy(layer[edge_type_name(e)]) for e in model.edge_types},
                       aggr="sum") for layer in model.body.convs)

    def forward(self, x_dict, adj_dict, num_sampled_nodes_dict=None,
                num_sampled_edges_dict=None) -> torch.Tensor:
        from torch_geometric.utils import trim_to_layer

        h = {t: F.dropout(v.relu(), self.p, self.training) for t, v in self.inputs(x_dict).items()}
        for i, conv in enumerate(self.convs):
            if num_sampled_nodes_dict is not None:
                h, adj_dict, _ = trim_to_layer(i, num_sampled_nodes_dict, num_sampled_edges_dict,
                                               h, adj_dict)
            h = conv(h, adj_dict)
            if i < len(self.convs) - 1:
                h = {t: F.dropout(v.relu(), self.p, self.training) for t, v in h.items()}
        return h[self.target]


def typed_inputs(edge_types: list):
    """``plain_epoch``'s step of a ``HeteroData`` batch: ``(x_dict, adj_t_dict or
    edge_index_dict)`` (every edge type of ``edge_types`` present), the per-type per-hop counts
    when ``trim`` (``HierarchicalSage``'s keywords), the target seeds' labels."""
    def inputs(model, batch, trim: bool) -> tuple:
        store = batch[TARGET]
        sparse = "adj_t" in batch[batch.edge_types[0]]
        adj = batch.adj_t_dict if sparse else typed_edges(batch, tuple(edge_types))
        kwargs = ({"num_sampled_nodes_dict": batch.num_sampled_nodes_dict,
                   "num_sampled_edges_dict": batch.num_sampled_edges_dict} if trim else {})
        return (batch.x_dict, adj), kwargs, store.y[:store.batch_size]
    return inputs


def typed_probe_loss(model: nn.Module, probe) -> float:
    """Cross-entropy on the seeds of the fixed typed ``LossBatch`` ``probe``, eval mode,
    untrimmed forward."""
    training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(probe.x, probe.edge_index)[probe.rows]
        loss = F.cross_entropy(logits, probe.target)
    model.train(training)
    return float(loss)


def check_counts(loader, model: nn.Module, best: nn.Module, batches: int = 3) -> float:
    """Largest |trimmed - untrimmed| seed logit of ``best`` over ``batches`` batches of the
    ``adj_t`` ``loader`` (eval mode; ``model`` the to_hetero model with the same weights on the
    same batch, as a second reference)."""
    worst, inputs = 0.0, typed_inputs(model.edge_types)
    best.eval()
    model.eval()
    with torch.no_grad():
        for _, batch in zip(range(batches), loader):
            (x, adj), kwargs, y = inputs(best, batch, True)
            trimmed = best(x, adj, **kwargs)[:y.numel()]
            worst = max(worst, float((trimmed - best(x, adj)[:y.numel()]).abs().max()),
                        float((trimmed - model(x, adj)[:y.numel()]).abs().max()))
    best.train()
    model.train()
    return worst


# -------------------------------------------------------------------------------- the run
def run(args: argparse.Namespace) -> dict:
    fanout = tuple(int(k) for k in args.fanout.split(","))
    cfg = TrainParams(model="sage", sampler="neighbor", neighbor=NeighborParams(fanout),
                      num_layers=len(fanout), batch_size=args.batch_size, epochs=args.epochs,
                      patience=args.epochs + 1, checkpoint=CheckpointParams(every=0))
    started = time.perf_counter()
    graph = load_graph(args)
    print(f"# graph: {describe(graph)}; built/loaded in {time.perf_counter() - started:.1f} s")
    papers = graph.num_nodes_dict[TARGET]
    order = torch.randperm(papers, generator=torch.Generator().manual_seed(args.seed))
    train_idx = order[:args.seeds]
    roles = np.full(papers, ROLE_CODES["unused"], dtype=np.int8)
    roles[train_idx.numpy()] = ROLE_CODES["train"]
    roles[order[args.seeds:args.seeds + 2048].numpy()] = ROLE_CODES["val"]
    in_dims = {t: int(v.shape[1]) for t, v in graph.x.items()}
    metadata = graph.metadata()
    print(f"# typed GraphSAGE hidden {cfg.hidden}, {cfg.num_layers} layers, {graph.num_classes} "
          f"classes; fan-out {list(fanout)} per edge type, batch {cfg.batch_size}, "
          f"{train_idx.numel():,} paper seeds per epoch, {args.epochs} epoch(s) x "
          f"{args.rounds} round(s) per row; {args.threads} torch threads")

    def make_model():
        return build_hetero_model("sage", metadata, in_dims, graph.num_classes, TARGET, cfg)

    def adam(model):
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    probe = next(iter(typed_neighbor_batches(graph, graph.csr, train_idx[:2048].numpy(),
                                             cfg.neighbor, 2048, args.seed + 1)))
    split = np.flatnonzero(roles != ROLE_CODES["unused"])
    evaluator = NoEvaluation(torch.from_numpy(split), roles[split],
                             graph.num_classes, probe, typed_probe_loss)
    tick = time.perf_counter()
    ours = typed_neighbor_batches(graph, graph.csr, train_idx.numpy(), cfg.neighbor,
                                  cfg.batch_size, args.seed)
    setup = {"gnnpipe": time.perf_counter() - tick}
    peer = peer_library()
    peer_loader = best_loader = None
    if peer is not None:
        from torch_geometric.loader import NeighborLoader

        data = hetero_data(graph, graph.csr)
        tick = time.perf_counter()  # NeighborLoader converts every edge type to CSC here
        peer_loader = NeighborLoader(data, num_neighbors=list(fanout), batch_size=cfg.batch_size,
                                     input_nodes=(TARGET, train_idx), shuffle=True)
        setup["peer"] = time.perf_counter() - tick
        if peer == "torch-sparse":  # pyg-lib would return the counts itself
            tick = time.perf_counter()
            best_loader = NeighborLoader(
                data, num_neighbors=list(fanout), batch_size=cfg.batch_size,
                input_nodes=(TARGET, train_idx), shuffle=True, transform=T.ToSparseTensor(),
                transform_sampler_output=lambda out: hetero_hop_counts(out, len(fanout), TARGET))
            setup["peer_best"] = time.perf_counter() - tick
    print("# loader set-up: " + ", ".join(f"{k} {v:.1f} s" for k, v in setup.items()))
    if args.check and best_loader is not None:
        model = make_model()
        print(f"# check: trimmed vs untrimmed seed logits, max |diff| "
              f"{check_counts(best_loader, model, HierarchicalSage(model)):.2e}")

    keys = ["fit", "fit_untrimmed", "peer", "peer_best", "plain"]
    names = dict(zip(keys, ["gnnpipe fit (typed sage)", "gnnpipe fit, untrimmed",
                            f"PyG recipe ({peer})" if peer else "PyG recipe",
                            "PyG best (torch-sparse, trim, adj_t)",
                            "PyG recipe loop on gnnpipe's sampler"]))
    run_keys = set(keys if args.rows == "all" else args.rows.split(","))
    epochs: dict[str, list[dict]] = {names[k]: [] for k in keys}
    inputs = typed_inputs(list(graph.csr))
    print(HEADER)

    # warm-up, untimed: one training step per loader and model (first-call allocations)
    for loader, wrap, trim in ((ours.loader, None, False), (peer_loader, None, False),
                               (best_loader, HierarchicalSage, True)):
        if loader is not None:
            warm = make_model() if wrap is None else wrap(make_model())
            (x, adj), kwargs, y = inputs(warm, next(iter(loader)), trim)
            F.cross_entropy(warm(x, adj, **kwargs)[:y.numel()], y).backward()
    warm = make_model()
    batch_output(warm, next(iter(ours))).sum().backward()  # the LossBatch path fit takes

    untrimmed = Batches(ours.loader, lambda data: dataclasses.replace(
        ours.convert(data), num_sampled_nodes=None, num_sampled_edges=None))

    def fit_row(key: str, r: int) -> None:
        for e in timed_fit(make_model, cfg, args.seed + r,
                           ours if key == "fit" else untrimmed, evaluator, LoopOptions()):
            record(epochs, names[key], e)

    def loop_row(key: str, r: int) -> None:
        loader = {"peer": peer_loader, "peer_best": best_loader}.get(key, ours.loader)
        if loader is None:
            if r == 0:
                print(f"{names[key]:40s} not run: needs torch-sparse, not installed")
            return
        torch.manual_seed(args.seed + r)
        model = HierarchicalSage(make_model()) if key == "peer_best" else make_model()
        optimizer = adam(model)
        for _ in range(args.epochs):
            e = plain_epoch(model, optimizer, loader, inputs, trim=key == "peer_best")
            e.update(probe=typed_probe_loss(model, probe), load1=os.getloadavg()[0])
            record(epochs, names[key], e)

    interleave(keys, run_keys, args.rounds, lambda key, r: (
        fit_row if key.startswith("fit") else loop_row)(key, r))
    summary = summarize(epochs, [names[k] for k in ("peer", "peer_best", "fit_untrimmed")],
                        [names[k] for k in ("fit", "fit_untrimmed", "plain")])
    return {"graph": describe(graph), "fanout": list(fanout), "batch_size": cfg.batch_size,
            "seeds_per_epoch": int(train_idx.numel()), "peer": peer or "none",
            "setup_seconds": setup, **summary}


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    print_machine()
    return finish({"machine": machine(), "threads": args.threads, "typed": run(args)},
                  args.json)


if __name__ == "__main__":
    main()
