"""DGL's GraphSAGE epoch on bench/train_epoch.py's graph: the DGL row of ``train_epoch --dgl``.

Runs inside DGL's own venv (bench/build_dgl.sh: dgl 2.1.0 on torch 2.2.1), so it imports neither
gnnpipe nor PyG; bench/train_epoch.py starts it once per round:

    .venv-dgl/bin/python bench/dgl_epoch.py DIR --round R --epochs 2 --seed S --threads 1

``DIR`` (``bench.train_epoch.write_dgl_inputs``) holds plain numpy files: ``indptr.npy`` int64
(N + 1,) and ``indices.npy`` int64 (E,) (gnnpipe's CSR: row = target, so DGL's CSC),
``x.npy`` float32 (N, F), ``y.npy`` int64 (N,), ``train.npy`` int64 (S,) (the epoch's seeds),
the probe batch (``probe_nid.npy`` global ids (P,), seeds first; ``probe_src.npy`` and
``probe_dst.npy`` its local edges), ``weights_R.npz`` (gnnpipe's initial PyG ``GraphSAGE``
state for round R, mapped by ``dgl_state``) and ``meta.json`` (fan-out in PyG's hop order,
batch size, hidden, layers, dropout, lr, weight decay, probe batch size).

The row is DGL's own recipe (its examples/pytorch/graphsage/node_classification.py): a
``dgl.graph`` from the CSC, ``dgl.dataloading.NeighborSampler`` (``prefetch_node_feats`` /
``prefetch_labels``: the loader slices x and y) in ``dgl.dataloading.DataLoader`` (shuffled,
``num_workers=0``), SAGEConv('mean') layers over the sampled blocks with ReLU and dropout between
them, cross-entropy on the seeds, Adam. DGL's ``fanouts[i]`` is layer i's, input layer first
(its ``sample_blocks`` walks them reversed from the seeds), PyG's ``num_neighbors[k]`` is hop
k+1's from the seeds: the same per-hop sample is DGL's list reversed.

Prints ``DGL_INIT {json}`` (the probe loss at the initial weights, before any step: equal to
gnnpipe's when the weight mapping is right) and one ``DGL_EPOCH {json}`` line per epoch:
``seconds`` (``model.train()`` through the last loss sum, as bench/epoch_steps.py's
``plain_epoch``), ``sample`` (the loader: DGL samples and slices features in one call),
``forward`` (model and loss), ``backward`` (``loss.backward()``), ``optimizer``, ``other``,
``loss`` (mean over the seeds), ``probe`` (eval-mode loss on the fixed probe batch after the
epoch), ``nodes_per_batch`` and ``load1``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

import numpy as np

_PYG_KEY = re.compile(r"convs\.(\d+)\.(lin_l\.weight|lin_l\.bias|lin_r\.weight)")
# PyG SAGEConv: out = lin_l(mean_j x_j) + lin_r(x_i), the bias on lin_l; DGL SAGEConv('mean'):
# out = fc_neigh(mean_j x_j) + fc_self(x_i), the bias on fc_self (dgl 2.1)
_TO_DGL = {"lin_l.weight": "fc_neigh.weight", "lin_l.bias": "fc_self.bias",
           "lin_r.weight": "fc_self.weight"}


def dgl_state(pyg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """PyG ``GraphSAGE`` state (``convs.{i}.lin_l.weight`` (out, in), ``convs.{i}.lin_l.bias``
    (out,), ``convs.{i}.lin_r.weight`` (out, in)) -> the state of ``SAGE`` below:
    ``layers.{i}.fc_neigh.weight``, ``layers.{i}.fc_self.bias``, ``layers.{i}.fc_self.weight``,
    the same arrays. Any other key (normalize, project, a JK head) has no DGL counterpart here."""
    out = {}
    for key, value in pyg.items():
        match = _PYG_KEY.fullmatch(key)
        if match is None:
            raise ValueError(f"{key!r} is not a PyG SAGEConv weight that DGL's SAGEConv('mean') "
                             "holds (lin_l.weight, lin_l.bias, lin_r.weight)")
        out[f"layers.{match[1]}.{_TO_DGL[match[2]]}"] = value
    return out


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", type=Path, help="folder written by write_dgl_inputs")
    parser.add_argument("--round", type=int, default=0, help="which weights_R.npz to start from")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="shuffling, sampling and dropout")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("DGLBACKEND", "pytorch")
    import dgl
    import torch
    import torch.nn.functional as F
    from dgl.nn import SAGEConv

    class SAGE(torch.nn.Module):
        """DGL's GraphSAGE: SAGEConv('mean') per layer, ReLU and dropout between layers (PyG's
        ``GraphSAGE`` order: conv, act, dropout); ``graphs`` one block (or graph) per layer."""

        def __init__(self, dims: list[int], dropout: float):
            super().__init__()
            self.layers = torch.nn.ModuleList(SAGEConv(a, b, "mean")
                                              for a, b in zip(dims, dims[1:]))
            self.dropout = torch.nn.Dropout(dropout)

        def forward(self, graphs, h):
            for i, (layer, g) in enumerate(zip(self.layers, graphs)):
                h = layer(g, h)  # (src nodes, in) -> (dst nodes, out)
                if i < len(self.layers) - 1:
                    h = self.dropout(F.relu(h))
            return h

    torch.set_num_threads(args.threads)
    d = args.inputs
    meta = json.loads((d / "meta.json").read_text())
    x, y = torch.from_numpy(np.load(d / "x.npy")), torch.from_numpy(np.load(d / "y.npy"))
    indptr, indices = (torch.from_numpy(np.load(d / f)) for f in ("indptr.npy", "indices.npy"))
    train = torch.from_numpy(np.load(d / "train.npy"))
    # gnnpipe's CSR rows are targets: DGL's CSC, in-edges, what NeighborSampler('in') reads
    g = dgl.graph(("csc", (indptr, indices, torch.empty(0, dtype=torch.int64))),
                  num_nodes=x.shape[0])
    g.ndata["feat"], g.ndata["label"] = x, y
    nid = torch.from_numpy(np.load(d / "probe_nid.npy"))
    probe_g = dgl.graph((torch.from_numpy(np.load(d / "probe_src.npy")),
                         torch.from_numpy(np.load(d / "probe_dst.npy"))), num_nodes=nid.numel())
    probe_x, probe_y = x[nid], y[nid[:meta["probe_size"]]]

    dims = [x.shape[1]] + [meta["hidden"]] * (meta["num_layers"] - 1) + [meta["num_classes"]]
    torch.manual_seed(args.seed)
    dgl.seed(args.seed)
    model = SAGE(dims, meta["dropout"])
    weights = np.load(d / f"weights_{args.round}.npz")
    model.load_state_dict({k: torch.from_numpy(v) for k, v in dgl_state(dict(weights)).items()})
    optimizer = torch.optim.Adam(model.parameters(), lr=meta["lr"],
                                 weight_decay=meta["weight_decay"])
    sampler = dgl.dataloading.NeighborSampler(meta["fanout"][::-1],  # input layer first
                                              prefetch_node_feats=["feat"],
                                              prefetch_labels=["label"])
    loader = dgl.dataloading.DataLoader(g, train, sampler, batch_size=meta["batch_size"],
                                        shuffle=True, drop_last=False, num_workers=0)

    def probe() -> float:
        """Cross-entropy on the probe's seeds, eval mode: every layer over the whole probe
        subgraph (the seeds' rows equal a trimmed forward's)."""
        model.eval()
        with torch.no_grad():
            logits = model([probe_g] * len(model.layers), probe_x)[:meta["probe_size"]]
            loss = F.cross_entropy(logits, probe_y)
        model.train()
        return float(loss)

    print("DGL_INIT " + json.dumps({"probe": probe(), "torch": torch.__version__,
                                    "dgl": dgl.__version__, "threads": torch.get_num_threads()}),
          flush=True)
    # warm-up, untimed: one batch through sampler and model on a throwaway copy (first-call
    # allocations, DGL's lazy formats), as train_epoch warms its loaders
    warm = SAGE(dims, meta["dropout"])
    _, _, blocks = next(iter(loader))
    F.cross_entropy(warm(blocks, blocks[0].srcdata["feat"]), blocks[-1].dstdata["label"]).backward()

    for _ in range(args.epochs):
        spent = dict.fromkeys(("sample", "forward", "backward", "optimizer"), 0.0)
        loss_sum, seeds, nodes, batches = 0.0, 0, 0, 0
        started = time.perf_counter()
        model.train()
        batches_iter = iter(loader)
        while True:
            tick = time.perf_counter()
            item = next(batches_iter, None)
            tock = time.perf_counter()
            spent["sample"] += tock - tick
            if item is None:
                break
            _, _, blocks = item
            optimizer.zero_grad()
            labels = blocks[-1].dstdata["label"]
            tick = time.perf_counter()
            loss = F.cross_entropy(model(blocks, blocks[0].srcdata["feat"]), labels)
            tock = time.perf_counter()
            spent["forward"] += tock - tick
            loss.backward()
            tick = time.perf_counter()
            spent["backward"] += tick - tock
            optimizer.step()
            spent["optimizer"] += time.perf_counter() - tick
            loss_sum += float(loss.detach()) * labels.numel()
            seeds += labels.numel()
            nodes += blocks[0].num_src_nodes()
            batches += 1
        seconds = time.perf_counter() - started
        spent["other"] = seconds - sum(spent.values())
        print("DGL_EPOCH " + json.dumps({
            "seconds": seconds, **{f"{k}_seconds": v for k, v in spent.items()},
            "seeds": seeds, "batches": batches, "loss": loss_sum / max(seeds, 1),
            "probe": probe(), "nodes_per_batch": nodes / max(batches, 1),
            "load1": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
