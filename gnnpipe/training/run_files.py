"""What the train and baseline stage commands share around a fit: checkpoint setup, the
outputs of a node or link model, and the rank's memory high-water mark."""

from __future__ import annotations

import json
import resource
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from gnnpipe import io
from gnnpipe.config import load_params, to_dict
from gnnpipe.data.graph import edge_type_name
from gnnpipe.io.common import FEATURE_DTYPES
from gnnpipe.reporting.node_metric import METRIC_NAMES
from gnnpipe.training.loop import PERF_COLUMNS, Checkpointing
from gnnpipe.training.sharding import gather_objects


def checkpointing_for(args, cfg, section: dict, seed: int, inputs: list[Path],
                      ctx) -> Checkpointing:
    """Checkpoints at ``args.checkpoint`` keyed by ``section`` + ``seed`` + the input files, so a
    checkpoint of other params or inputs is never resumed; announces a resume on rank 0."""
    fingerprint = io.input_fingerprint(section, seed, inputs)
    resume = cfg.checkpoint.resume
    resume_from = io.read_checkpoint(args.checkpoint, fingerprint) if resume else None
    if resume_from is not None and ctx.is_main:
        print(f"gnnpipe train: resuming from {args.checkpoint} (epoch {resume_from['epoch']})")
    return Checkpointing(
        every=cfg.checkpoint.every, resume_from=resume_from,
        save=lambda payload: io.write_checkpoint(args.checkpoint, payload, fingerprint))


# the dataset keys that shape the graph a model reads (how prepare reads the tables, the edge
# policies, the types): model.pt carries them, and the train stage lists them as its params
GRAPH_KEYS = ("task", "source", "layout", "nodes", "edges", "undirected", "dedup", "self_loops",
              "typed")


def model_inference(args) -> dict:
    """model.pt's ``inference`` part (gnnpipe/io/models.py): what scoring a new graph needs,
    from the params the train stage lists (``args.params``) and the artifacts it reads
    (data/prepared, data/features); plain containers and tensors only."""
    params = load_params(args.params)
    plain = json.loads(json.dumps({  # tuples as lists: what YAML gives, and weights_only loads
        "seed": params.seed, "dataset": {k: to_dict(params.dataset)[k] for k in GRAPH_KEYS},
        "train": to_dict(params.train)}))
    graph = io.read_graph(args.prepared, mmap=True, stored_x=True)
    classes = (io.read_classes(args.prepared) if (args.prepared / "classes.parquet").exists()
               else pa.array(range(graph.num_classes), pa.int64()))
    ids = {}
    for t in graph.node_types:
        path = args.prepared / io.node_ids_file(t)
        ids[t] = str(io.node_id_type(args.prepared, t)) if path.exists() else "node_id"
    stored = {v: k for k, v in FEATURE_DTYPES.items()}[graph.x[graph.target].dtype]
    features = io.read_features(args.features)
    return {"params": plain, "features": {k: v for k, v in features.items() if k != "schema"},
            "feature_dtype": stored,
            "feature_widths": {t: int(x.shape[1]) for t, x in graph.x.items()},
            "classes": classes.to_pylist(), "class_type": str(classes.type), "ids": ids,
            "graph": {"layout": graph.layout, "target": graph.target,
                      "node_types": list(graph.node_types),
                      "featureless": io.read_featureless(args.prepared),
                      "edge_types": [edge_type_name(e) for e in graph.edge_types]}}


def write_node_outputs(args, result, model_meta: dict | None) -> None:
    """Predictions of every node (and the weights, unless a baseline) into ``args.out``."""
    with io.atomic_dir(args.out) as out:
        io.write_predictions(out, result.node_id, result.logits)
        if model_meta is not None:
            io.save_model(out, result.state_dict, model_meta, model_inference(args))


def write_link_outputs(args, result, model_meta: dict | None) -> None:
    """Scores of every supervision and negative pair (and the weights) into ``args.out``."""
    with io.atomic_dir(args.out) as out:
        io.write_link_predictions(out, result.scores)
        if result.hard_scores:
            io.write_hard_link_scores(out, result.hard_scores)
        if model_meta is not None:
            io.save_model(out, result.state_dict, model_meta, model_inference(args))


def write_run_files(args, result, metrics: dict, perf: dict) -> None:
    """metrics, perf and the per-epoch history: what every fit writes beside its outputs."""
    io.write_json(args.metrics, metrics)
    io.write_json(args.perf, perf)
    io.write_csv(args.history, result.history)


def best_line(summary: dict) -> str:
    """``best val acc 0.8123``, or with another metric ``best val ROC-AUC 0.9012 (acc 0.8123)``:
    the value early stopping kept, named."""
    if summary["metric"] == "accuracy":
        return f"best val acc {summary['best_val_acc']:.4f}"
    return (f"best val {METRIC_NAMES[summary['metric']]} {summary['best_val']:.4f} "
            f"(acc {summary['best_val_acc']:.4f})")


def peak_rss_mb() -> float:
    """This process's high-water mark (ru_maxrss is KiB on Linux), its inputs included."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def finish_run(args, result, ctx, rank_info: dict, write_outputs: Callable[[], None],
               metrics: dict, perf: dict) -> bool:
    """Gathers every rank's memory high-water mark; rank 0 then writes the outputs, metrics,
    perf, histories and drops the checkpoint (the outputs now hold everything it had).
    False on the other ranks."""
    ranks = gather_objects({"rank": ctx.rank, **rank_info, "peak_rss_mb": peak_rss_mb()}, ctx)
    if not ctx.is_main:
        return False
    write_outputs()
    write_run_files(args, result, metrics, {**result.perf, **perf, "ranks": ranks})
    # a run resumed from the checkpoint of its last epoch trains no epoch here: header only
    io.write_csv(args.perf_history, result.perf_history, header=PERF_COLUMNS)
    io.remove_on_publish(args.checkpoint)  # once the outputs that supersede it are published
    return True
