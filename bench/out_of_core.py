"""Out-of-core neighbor training (issue #16 item 2): peak RSS and seeds/s of training that
reads each batch's feature rows from the memory-mapped features_node.npy (gnnpipe's path under
``train.sampler: neighbor``), against the whole matrix held by the process, same graph, same run.

    python -m bench.out_of_core --dir /tmp/ooc --nodes 2000000 --features 1024
    python -m bench.out_of_core --dir /tmp/ooc --prepare-only      # prepare's peak RSS alone
    python -m bench.out_of_core --dir /tmp/bf16 --accuracy         # issue #20 item 4

``--accuracy``: the default graph (params.yaml defaults) through prepare, split and train with
``train.sampler: neighbor``, once with float32 features and once with
``dataset.storage.feature_dtype: bfloat16`` + ``train.amp: true`` (batches gathered in bfloat16,
the model under autocast); prints best val and test accuracy of each (goal: within 0.5 points).

Every measured phase runs in its own child process, which reports its peak RSS (VmHWM of
/proc/self/status: anonymous and file-backed pages it ever held) and its seeds/s:
- ``prepare``: ``gnnpipe prepare`` with ``dataset.storage.features: external`` (features
  streamed to features_node.npy in row blocks);
- ``out_of_core``: ``ModelFeatures`` over the mapped file, pages dropped every 256 MiB;
- ``mapped``: today's path, the float32 tensor of a long-lived map (every touched page stays
  resident; the kernel may evict them under pressure, the RSS peak still counts them);
- ``in_memory`` (with ``--in-memory``, when RAM allows): the whole matrix read into anonymous
  memory first.
Training: GraphSAGE (train.hidden 64, 2 layers), Adam, ``--batches`` batches of
``--batch-size`` train seeds (10% of nodes), fan-out ``--fanout``; the first 5 batches warm up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml


def _peak_rss_bytes() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def child_prepare(args) -> dict:
    from gnnpipe.cli import main

    os.chdir(args.dir)
    params = {"dataset": {"synthetic": {"num_nodes": args.nodes, "num_features": args.features,
                                        "avg_degree": args.avg_degree, "num_classes": 10},
                          "storage": {"features": args.storage}}}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    start = time.perf_counter()
    assert main(["prepare", "--out", "prepared", "--metrics", "prepare.json"]) == 0
    return {"seconds": round(time.perf_counter() - start, 1)}


def child_train(args) -> dict:
    import numpy as np
    import torch

    from gnnpipe import io
    from gnnpipe.config import params_from_dict
    from gnnpipe.data.features import FeatureTransform, ModelFeatures
    from gnnpipe.io.rows import FeatureSource
    from gnnpipe.training.models import build_model
    from gnnpipe.sampling import neighbor_loader

    torch.manual_seed(0)
    prepared = Path(args.dir) / "prepared"
    graph = io.read_graph(prepared, mmap=True, stored_x=True).target_view()
    if args.child == "out_of_core":
        x = ModelFeatures(FeatureSource(graph.x, mapped=True), FeatureTransform())
    elif args.child == "mapped":
        x = graph.x  # float32 storage: the map itself, as read_graph(mmap=True) gives it today
    else:
        x = graph.x.clone()  # anonymous memory: the whole matrix
    cfg = params_from_dict({"train": {"sampler": "neighbor", "hidden": 64,
                                      "neighbor": {"num_neighbors": args.fanout}}}).train
    rng = np.random.default_rng(0)
    seeds = torch.from_numpy(np.sort(rng.choice(graph.num_nodes, graph.num_nodes // 10,
                                                replace=False)))
    loader = neighbor_loader(x, graph.y.clamp(min=0), graph.csr, seeds, cfg.neighbor, 1,
                             batch_size=args.batch_size)
    model = build_model("sage", graph.x.shape[1], graph.num_classes, cfg)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    seen, start, warm = 0, None, 5
    for step, batch in enumerate(loader):
        if step == warm:
            start, seen = time.perf_counter(), 0
        if step == warm + args.batches:
            break
        opt.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = torch.nn.functional.cross_entropy(out, batch.y[:batch.batch_size])
        loss.backward()
        opt.step()
        seen += batch.batch_size
    elapsed = time.perf_counter() - start
    return {"seeds_per_s": round(seen / elapsed, 1), "batches": args.batches,
            "seconds": round(elapsed, 1), "loss": round(float(loss), 4)}


def accuracy(args) -> dict:
    """Val / test accuracy of neighbor training on the default graph, float32 vs bfloat16+amp."""
    import torch

    from gnnpipe import io
    from gnnpipe.cli import main as cli
    from gnnpipe.data.graph import ROLE_CODES

    out = {}
    for name, storage, amp in (("float32", "float32", False), ("bfloat16_amp", "bfloat16", True)):
        root = args.dir / name
        root.mkdir(parents=True, exist_ok=True)
        os.chdir(root)
        Path("params.yaml").write_text(yaml.safe_dump({
            "dataset": {"storage": {"feature_dtype": storage}},
            "train": {"sampler": "neighbor", "amp": amp}}))
        start = time.perf_counter()
        for stage in ("prepare", "split", "train"):
            assert cli([stage]) == 0, stage
        roles = io.read_typed_role_codes(Path("data/split"))
        pred = torch.load("data/model/predictions.pt", weights_only=True)
        y = io.read_graph(Path("data/prepared")).y[pred["node_id"]]
        test = torch.from_numpy(roles[pred["node_id"].numpy()] == ROLE_CODES["test"])
        hit = pred["logits"].argmax(1) == y
        summary = json.loads(Path("metrics/train.json").read_text())
        out[name] = {"best_val_acc": summary["best_val_acc"], "epochs": summary["epochs_run"],
                     "test_acc": round(float(hit[test].float().mean()), 5),
                     "seconds": round(time.perf_counter() - start, 1)}
    out["test_points_bf16_minus_f32"] = round(
        100 * (out["bfloat16_amp"]["test_acc"] - out["float32"]["test_acc"]), 2)
    return out


def run_child(args, name: str) -> dict:
    cmd = [sys.executable, "-m", "bench.out_of_core", "--child", name, "--dir", str(args.dir),
           "--nodes", str(args.nodes), "--features", str(args.features),
           "--avg-degree", str(args.avg_degree), "--batches", str(args.batches),
           "--batch-size", str(args.batch_size), "--storage", args.storage,
           "--fanout", *map(str, args.fanout)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{name}: {result}", file=sys.stderr)
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--nodes", type=int, default=2_000_000)
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--avg-degree", type=float, default=4.0)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--fanout", type=int, nargs="+", default=[10, 5])
    parser.add_argument("--storage", default="external")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved training rounds")
    parser.add_argument("--in-memory", action="store_true", help="also the anonymous copy")
    parser.add_argument("--prepare-only", action="store_true")
    parser.add_argument("--skip-prepare", action="store_true")
    parser.add_argument("--child", default=None)
    parser.add_argument("--accuracy", action="store_true", help="bfloat16 vs float32 accuracy")
    args = parser.parse_args(argv)
    if args.accuracy:
        report = {"load_before": os.getloadavg(), **accuracy(args),
                  "load_after": os.getloadavg()}
        print(json.dumps(report, indent=1))
        return
    if args.child:
        result = child_prepare(args) if args.child == "prepare" else child_train(args)
        print(json.dumps({**result, "peak_rss_bytes": _peak_rss_bytes()}))
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    feature_bytes = args.nodes * args.features * 4
    report = {"nodes": args.nodes, "features": args.features, "feature_bytes": feature_bytes,
              "load_before": os.getloadavg()}
    if not args.skip_prepare:
        report["prepare"] = run_child(args, "prepare")
    if not args.prepare_only:
        paths = ["out_of_core", "mapped"] + (["in_memory"] if args.in_memory else [])
        for r in range(args.rounds):
            for name in paths:
                report.setdefault(name, []).append(run_child(args, name))
        ooc = max(r["seeds_per_s"] for r in report["out_of_core"])
        peer = max(r["seeds_per_s"] for r in report["mapped"] + report.get("in_memory", []))
        report["ooc_peak_rss_over_feature_bytes"] = round(
            max(r["peak_rss_bytes"] for r in report["out_of_core"]) / feature_bytes, 3)
        report["ooc_over_in_memory_seeds_per_s"] = round(ooc / peer, 3)
    report["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
