"""torch.compile and AMP, measured: train-epoch time of gnnpipe's own loop, eager vs compiled.

    python -m bench.compile --threads 1        # params.yaml graph, sage, full + neighbor
    python -m bench.compile --samplers full    # quicker
    python -m bench.compile --json /tmp/c.json # also keep the rows

Every variant trains the same model from the same seed on the same split with
``gnnpipe.training.train.fit`` and its own switches (``train.compile``: ``torch.compile(model,
dynamic=True)``; ``train.amp``: bfloat16 autocast on CPU), for ``--epochs`` epochs without early
stopping. ``first`` is epoch 1's train time, which holds the compilation (dynamo + inductor,
cold: a fresh cache per compiled variant unless ``--warm-cache``; neighbor batches vary in
size, so ``dynamic=True`` should compile them once, not per shape);
``steady`` is the median train time of epochs 2.. (evaluation excluded: ``fit`` evaluates with
the eager model either way); ratios are eager fp32's steady time over the variant's (> 1 =
faster). ``steps only`` times the same training steps (forward, loss, backward, Adam) on one
epoch's batches sampled beforehand (median of 2 passes after a warm-up pass; wall and
CPU seconds, the latter robust to a shared machine's load with ``--threads 1``): the share of an
epoch that compile and AMP can change at all, without sampling and gathering. ``graphs`` counts
the graphs dynamo compiled in the ``fit`` run (recompilations show up here), and
``val acc`` checks that a variant still learns. The graph is the pipeline's own (``prepare`` on
``dataset`` of ``--params``, 20k nodes by default), split as the split stage splits it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import describe, machine, prepared_graph, print_machine
from gnnpipe.config import load_params, replace
from gnnpipe.io.common import role_codes
from gnnpipe.training.loop import COMPILE_BACKEND, LoopOptions
from gnnpipe.training.models import build_model
from gnnpipe.runtime.rng import make_rng, torch_seed
from gnnpipe.sampling.builders import neighbor_batches
from tests.split_oracle import split_nodes
from gnnpipe.training.train import _loss, _step, build_inputs, fit
from gnnpipe.data.graph import phase_csrs

VARIANTS = {  # name: (compile, amp)
    "eager fp32": (False, False),
    "compiled fp32": (True, False),
    "eager bf16 amp": (False, True),
    "compiled bf16 amp": (True, True),
}


def compiled_graphs() -> int:
    import torch._dynamo.utils

    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def cold_compile_cache():
    """A fresh, empty inductor / autograd cache (a temp folder, in-memory caches cleared), so
    each compiled variant's first epoch pays the whole compilation, as a first run would."""
    from torch._inductor import utils

    fresh = getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache  # torch < 2.8
    return fresh()


def run_variant(graph, node_split, cfg, seed: int, compile_model: bool, amp: bool,
                warm_cache: bool = False) -> dict:
    """One training run; per-epoch train seconds from ``fit``'s perf_history."""
    import torch._dynamo

    torch._dynamo.reset()  # dynamo forgets earlier variants' graphs
    torch._dynamo.utils.counters.clear()
    cache = contextlib.nullcontext() if warm_cache or not compile_model else cold_compile_cache()
    with cache:
        return _run_variant(graph, node_split, cfg, seed, compile_model, amp)


def _run_variant(graph, node_split, cfg, seed: int, compile_model: bool, amp: bool) -> dict:
    graphs = phase_csrs(node_split.message_graphs)
    inputs = build_inputs(graph.x, message_graphs=graphs)
    loader = None
    if cfg.sampler == "neighbor":
        train = torch.from_numpy(np.flatnonzero(node_split.roles == "train"))
        loader = neighbor_batches(graph.x, graph.y, graphs["train"], train,
                                  cfg.neighbor, torch_seed(seed, "sample"),
                                  batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                                  edge_index=inputs["train"].edge_index)
    started = time.perf_counter()
    try:
        result = fit(lambda: build_model(cfg.model, graph.x.shape[1], graph.num_classes, cfg),
                     inputs, graph.y, role_codes(node_split.roles), cfg, torch_seed(seed, "train"),
                     loader=loader, options=LoopOptions(amp=amp, compile_model=compile_model))
    except ValueError as err:  # train.compile's one-line report of a compiler failure
        return {"error": str(err)}
    epochs = [row["train_seconds"] for row in result.perf_history]
    graphs = compiled_graphs() if compile_model else 0
    # the same steps on batches sampled beforehand: what compile / AMP can speed up at all
    batches = list(loader) if loader is not None else [
        torch.from_numpy(np.flatnonzero(node_split.roles == "train"))]
    steps_s, steps_cpu_s = time_steps(
        lambda: build_model(cfg.model, graph.x.shape[1], graph.num_classes, cfg), cfg,
        inputs["train"], batches, graph.y, compile_model, amp)
    return {"first_s": epochs[0], "steady_s": statistics.median(epochs[1:]),
            "epoch_s": epochs, "steps_s": steps_s,
            "steps_cpu_s": steps_cpu_s, "batches": result.perf_history[0]["batches"],
            "graphs": graphs, "val_acc": result.summary["best_val_acc"],
            "wall_s": round(time.perf_counter() - started, 2)}


def time_steps(build, cfg, train_input, batches: list, y: torch.Tensor, compile_model: bool,
               amp: bool, repeats: int = 2) -> tuple[float, float]:
    """Median wall and CPU (process) seconds of one pass of training steps (forward, loss,
    backward, Adam) over ``batches``, after one warm-up pass (compilation, recompiles for odd
    batch sizes). CPU seconds hold up under a shared machine's load (with ``--threads 1``)."""
    torch.manual_seed(0)
    model = build()
    trained = (torch.compile(model, dynamic=True, backend=COMPILE_BACKEND) if compile_model
               else model)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    trained.train()

    def one_pass() -> tuple[float, float]:
        started, cpu = time.perf_counter(), time.process_time()
        for batch in batches:
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                logits, target, weight = _step(trained, train_input, batch, y)
                loss = _loss(logits, target, weight)
            loss.backward()
            optimizer.step()
        return time.perf_counter() - started, time.process_time() - cpu

    one_pass()
    passes = [one_pass() for _ in range(repeats)]
    return (statistics.median(p[0] for p in passes), statistics.median(p[1] for p in passes))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"),
                        help="the graph (dataset), split and train sections to start from")
    parser.add_argument("--model", default="sage")
    parser.add_argument("--samplers", nargs="+", default=["full", "neighbor"],
                        choices=["full", "neighbor"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--epochs", type=int, default=4, help="epochs per variant (>= 2)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--warm-cache", action="store_true",
                        help="keep inductor's on-disk cache (default: each compiled variant "
                             "compiles cold, in a fresh temp cache)")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here too")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be >= 2: epoch 1 holds the compilation")
    if args.threads:
        torch.set_num_threads(args.threads)
    params = load_params(args.params)
    typed = prepared_graph(params)
    node_split = split_nodes(typed, params.split.node, make_rng(params.seed, "split"))
    graph = typed.target_view()
    print_machine()
    print(f"# graph: {describe(graph)}; train nodes "
          f"{int((node_split.roles == 'train').sum()):,}; model {args.model}, "
          f"hidden {params.train.hidden}, {params.train.num_layers} layers, "
          f"{args.epochs} epochs per variant")
    rows = []
    for sampler in args.samplers:
        cfg = replace(params.train, model=args.model, sampler=sampler, epochs=args.epochs,
                      patience=args.epochs, checkpoint={"every": 0})
        fanouts = list(cfg.neighbor.num_neighbors)
        detail = (f"batch_size {cfg.batch_size}, num_neighbors {fanouts}"
                  if sampler == "neighbor" else "one full-graph step per epoch")
        print(f"\n## sampler {sampler} ({detail})\n")
        print("| variant | first epoch s (compile) | steady epoch s | vs eager fp32 "
              "| steps only s | steps CPU s | vs eager fp32 (CPU) | graphs | val acc |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        base = None
        for name in args.variants:
            compile_model, amp = VARIANTS[name]
            row = {"sampler": sampler, "variant": name,
                   **run_variant(graph, node_split, cfg, params.seed, compile_model, amp,
                                  args.warm_cache)}
            rows.append(row)
            if "error" in row:
                print(f"| {name} | failed: {row['error']} | | | | | | | |")
                continue
            if name == "eager fp32":
                base = (row["steady_s"], row["steps_cpu_s"])
            row["speedup"] = base[0] / row["steady_s"] if base else None
            row["steps_speedup"] = base[1] / row["steps_cpu_s"] if base else None
            ratios = [f"{r:.2f}x" if r else "n/a" for r in (row["speedup"], row["steps_speedup"])]
            print(f"| {name} | {row['first_s']:.2f} | {row['steady_s']:.3f} | {ratios[0]} | "
                  f"{row['steps_s']:.3f} | {row['steps_cpu_s']:.3f} | {ratios[1]} | "
                  f"{row['graphs'] or '-'} | "
                  f"{row['val_acc']:.4f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
