"""The pipeline in one table: each stage's params sections and the paths it reads and writes.

``gnnpipe.cli`` turns each path into the stage's ``--option`` with its default and help;
``python -m gnnpipe.dvc_yaml --write`` turns the table (and each stage's import closure) into
dvc.yaml. A path changes here, and both follow.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

Kind = Literal["in", "out", "perf", "record", "metric", "plot", "local"]
"""What dvc.yaml does with a path: ``in`` a dep; ``out`` a cached out; ``perf`` a cached out that
is no metric (timings differ run to run: cached, so DVC keeps it out of git and `dvc exp show`);
``record`` an uncached out kept in git (a stage's deterministic figures, read in the file: as a
DVC metric each key would be a `dvc exp show` column); ``metric`` / ``plot`` a metrics / plots
file (the one metrics file is the headline, ``metrics/summary.json``); ``local`` nothing (the
CLI's default for a file DVC does not track)."""


@dataclasses.dataclass(frozen=True)
class Artifact:
    option: str | None  # the stage's CLI option (None: not one, e.g. a params-named input)
    path: str  # its default, relative to the repository root
    kind: Kind
    help: str = ""  # the option's help, and the comment beside it in dvc.yaml
    read: tuple[str, ...] = ()  # files under ``path`` the stage reads: dvc.yaml lists only these
    dvc: dict = dataclasses.field(default_factory=dict)  # the out's options (cache, plot axes)

    @property
    def dvc_paths(self) -> list[str]:
        return [f"{self.path}/{name}" for name in self.read] or [self.path]


def _in(option, path, help="", read=()):
    return Artifact(option, path, "in", help, tuple(read))


def _out(option, path, help="", **dvc):
    return Artifact(option, path, "out", help, dvc=dvc)


def _perf(option, path, help):
    return Artifact(option, path, "perf", help)


def _record(option, path, help=""):
    return Artifact(option, path, "record", help, dvc={"cache": False})


def _metric(option, path, help=""):
    return Artifact(option, path, "metric", help, dvc={"cache": False})


def _plot(option, path, help="", **dvc):
    return Artifact(option, path, "plot", help, dvc={"cache": False, **dvc})


def _local(option, path, help):
    return Artifact(option, path, "local", help)


@dataclasses.dataclass(frozen=True)
class Stage:
    params: tuple[str, ...]  # the params.yaml keys it reads: DVC re-runs it when one changes
    paths: tuple[Artifact, ...]
    params_help: str = ""  # why ``params`` reaches beyond the stage's own section


# the folders and files the stages hand each other
PREPARED, SPLIT, FEATURES = "data/prepared", "data/split", "data/features"
PARTITION, PROPAGATE = "data/partition", "data/propagate"
BASELINE, MODEL, PREDICT = "data/baseline", "data/model", "data/predict"
DETAILS = "reports/eval_details.json"
SUMMARY = "metrics/summary.json"

STAGES: dict[str, Stage] = {
    "prepare": Stage(("threads", "seed", "dataset"), (
        _in(None, "${dataset.path}",
            "the input files (params.yaml dataset.path, default: the data/raw folder), so that "
            "editing them re-runs prepare; a path outside the repository works too"),
        _out("--out", PREPARED, "output folder"),
        _record("--metrics", "metrics/prepare.json",
                "counts: nodes, edges, duplicates and self-loops removed"),
    )),
    "split": Stage(("threads", "seed", "dataset.task", "split", "features"), (
        _in("--prepared", PREPARED, read=["graph.pt"]),
        _out("--out", SPLIT),
        _out("--features", FEATURES, "features.normalize fitted on the train nodes (transform.pt)"),
        _record("--audit", "metrics/split_audit.json",
                "audit report; written even when the audit fails"),
    )),
    "analyze": Stage(("threads", "seed", "analyze"), (
        _in("--prepared", PREPARED, read=["graph.pt"]),
        _in("--split", SPLIT, "adds per-phase message-graph figures"),
        _record("--metrics", "metrics/graph.json"),
        _plot("--degree-hist", "metrics/degree_hist.csv", "log2 degree histogram for `dvc plots`",
              template="simple", x="log2_bin", y="nodes",
              x_label="log2 degree bin (b >= 1: degrees 2^(b-1) .. 2^b - 1; 0: isolated)",
              y_label="nodes"),
    )),
    "partition": Stage(("threads", "seed", "partition"), (
        _in("--split", SPLIT),
        _out("--out", PARTITION, "node_to_part.parquet, part_<k>/ shards, meta.json"),
        _perf("--perf", "metrics/perf/partition.json",
              "wall time and peak memory (kept apart: they differ run to run)"),
        _record("--metrics", "metrics/partition.json",
                "edge cut, balance, part and halo sizes (deterministic)"),
    )),
    "propagate": Stage(("threads", "propagate"), (
        _in("--prepared", PREPARED, read=["graph.pt"]),
        _in("--split", SPLIT),
        _in("--features", FEATURES, "features.normalize as the split stage fitted it: X_0"),
        _out("--out", PROPAGATE, "<graph>_hop_<k>.pt (memory-mappable) and meta.json"),
        _perf("--perf", "metrics/perf/propagate.json",
              "seconds, effective GB/s and peak memory (differ run to run)"),
    )),
    "baseline": Stage(("threads", "seed", "dataset.task", "baseline", "evaluate.metric",
                       "train.class_weight"), (
        _in("--prepared", PREPARED, read=["graph.pt"]),
        _in("--split", SPLIT,
            "node roles; for dataset.task link also edges, negatives, message graphs"),
        _in("--features", FEATURES,
            "features.normalize as the split stage fitted it (transform.pt): what the GNN reads"),
        _out("--out", BASELINE),
        _perf("--perf", "metrics/perf/baseline.json",
              "wall time and throughput (kept apart: they differ run to run)"),
        _record("--metrics", "metrics/baseline.json"),
        _plot("--history", "metrics/baseline_history.csv"),
    ), params_help="baseline, the metric early stopping maximises (evaluate.metric) and the "
                   "loss's class weights (train.class_weight); no cluster key: the same bytes "
                   "on either engine"),
    # model.pt carries the dataset keys that shape a graph (gnnpipe.training.run_files.GRAPH_KEYS)
    "train": Stage(("threads", "seed", "dataset.task", "dataset.source", "dataset.layout",
                    "dataset.nodes", "dataset.edges", "dataset.undirected", "dataset.dedup",
                    "dataset.self_loops", "dataset.typed", "train", "evaluate.metric"), (
        _in("--prepared", PREPARED, "graph.pt; edge_attrs_<E>.parquet for train.temporal.by: edge"),
        _in("--split", SPLIT),
        _in("--features", FEATURES,
            "features.normalize as the split stage fitted it (transform.pt)"),
        _in("--propagate", PROPAGATE, "precomputed hops (train.sampler sign)"),
        _in("--partition", PARTITION,
            "parts and shards (train.sampler cluster, train.dist.shard partition)"),
        _out("--out", MODEL),
        _perf("--perf", "metrics/perf/train.json",
              "wall time and throughput (kept apart: they differ run to run)"),
        _record("--metrics", "metrics/train.json"),
        _plot("--history", "metrics/train_history.csv"),
        _plot("--perf-history", "metrics/perf/train_history.csv",
              "per-epoch seeds/s and batches/s (wall clock: cached, kept out of git)",
              x="epoch", y="seeds_per_s", cache=True),
        _local("--checkpoint", "data/checkpoint/train.pt",
               "resumable training state (train.checkpoint.every, train.checkpoint.resume)"),
    ), params_help="train, the metric early stopping maximises on val (evaluate.metric), and "
                   "the dataset keys model.pt carries to score a new graph (gnnpipe predict "
                   "--graph)"),
    "predict": Stage(
        ("threads", "predict", "train.model", "train.sampler", "train.hidden", "train.num_layers",
         "train.heads", "train.jk", "train.residual", "train.dropout", "train.inference",
         "train.dist"), (
            _in("--prepared", PREPARED,
                "graph.pt; node_ids*.parquet and classes.parquet: the user's ids and labels"),
            _in("--split", SPLIT, "roles and the test phase's message graph"),
            _in("--model", MODEL),
            _in("--propagate", PROPAGATE, "precomputed hops (train.sampler sign)"),
            _in("--features", FEATURES,
                "the fitted feature normalization (features.normalize), applied as train did"),
            # a dep on predict.pairs itself would be "" by default, which DVC refuses
            _in("--pairs-dir", "data/pairs",
                "the committed folder predict.pairs must name a file in, so that DVC sees "
                "edits to it"),
            _out("--out", PREDICT),
            _record("--metrics", "metrics/predict.json"),
        ), params_help="predict, and the train keys the model is rebuilt and run with"),
    "evaluate": Stage(("threads", "seed", "dataset.task", "train", "baseline", "propagate.hops",
                       "evaluate"), (
        _in("--prepared", PREPARED, "graph.pt; evaluate.seeds > 1 retrains as train does"),
        _in("--analysis", "metrics/graph.json",
            "analyze's homophily: the verdict names heterophily only when it is low"),
        _in("--baseline-metrics", "metrics/baseline.json",
            "which structure-free model the baseline stage chose on val (baseline.models)"),
        _in("--split", SPLIT),
        _in("--model", MODEL, read=["predictions.pt"]),
        _in("--baseline", BASELINE, read=["predictions.pt"]),
        # what train and baseline read: evaluate.seeds > 1 retrains both on it
        _in("--features", FEATURES, "features.normalize as the split stage fitted it"),
        _in("--propagate", PROPAGATE, "precomputed hops (train.sampler sign)"),
        _in("--partition", PARTITION, "parts and shards (train.sampler cluster)"),
        _out("--details", DETAILS, "per-class F1 and confusion matrices"),
        _record("--metrics", "metrics/eval.json"),
        _metric("--summary", SUMMARY,
                "the headline for `dvc metrics show` and `make exp`: test score of the GNN and "
                "of the baseline, the gain, the verdict"),
        # one row per test node: cached, kept out of git
        Artifact("--confusion", "reports/confusion_test.csv", "plot",
                 "(actual, predicted) of the GNN on every test node, for `dvc plots`",
                 dvc={"template": "confusion", "x": "predicted", "y": "actual",
                      "title": "GNN confusion matrix (test nodes)"}),
    ), params_help="evaluate, and the train and baseline sections evaluate.seeds retrains with"),
    # reads no params key that changes its output (threads only pins its thread count)
    "report": Stage((), (
        _in("--metrics-dir", "metrics",
            "folder of the stages' metrics files (prepare.json, graph.json, ...)",
            read=["prepare.json", "graph.json", "split_audit.json", "partition.json",
                  "train.json", "perf/train.json", "baseline.json", "eval.json",
                  "train_history.csv", "baseline_history.csv", "degree_hist.csv"]),
        _in("--details", DETAILS),
        _in("--prepared", PREPARED,
            "its classes.parquet names the classes by the user's label values",
            read=["classes.parquet"]),
        _out("--out", "reports/report.html"),
        _out("--figures", "reports/figures",
             "folder the PNGs are written to (the HTML embeds and links them)"),
        _local("--sweep-out", "reports/sweep",
               "with --sweep: where the depth-sweep plot and table go"),
    )),
}

PLOTS = {"training_curves": {"template": "linear", "x": "epoch",
                             "y": {"metrics/train_history.csv": ["train_loss", "val_acc"],
                                   "metrics/baseline_history.csv": ["val_acc"]}}}
"""dvc.yaml's top-level plots: curves drawn across stages' plot files."""

# dvc.yaml's top-level artifacts (`dvc artifacts get <repo> gnn-model`, DVC Studio's model
# registry): name -> the entry as DVC reads it. A path must lie in a stage's out (dvc_yaml checks).
# Labels are static strings, so they name every task the model can be for: which task, model and
# dataset a run used are params (model.pt's meta names the model and the task: io.save_model)
ARTIFACTS = {
    "gnn-model": {
        "path": f"{MODEL}/model.pt",
        "type": "model",
        "desc": "the trained GNN: weights + the meta that rebuilds it; "
                "torch.load(weights_only=True)",
        "labels": ["gnn", "gnnpipe", "pytorch-geometric", "node-classification",
                   "link-prediction"],
    },
}


# what each stage does, in one line: `gnnpipe --help` lists it without importing any command
HELP: dict[str, str] = {
    "prepare": "load dataset.source, validate it and write data/prepared (Parquet + torch CSR)",
    "split": "split nodes (or edges, dataset.task link) into train/val/test with leak-free "
             "message graphs; fails on a failed audit",
    "analyze": "graph diagnostics: homophily, degrees, components, labels; warns on low homophily",
    "partition": "partition the train-phase message graph (METIS, lp, random or bfs) into "
                 "per-part shards",
    "propagate": "precompute SIGN/SGC features A_hat^k X (k = 0..propagate.hops) per phase graph",
    "baseline": "train the structure-free MLP baseline (baseline section) on the same split",
    "train": "train train.model with train.sampler; writes weights, predictions, curves",
    "predict": "predict every node (unlabelled too) and export embeddings into data/predict",
    "evaluate": "score the GNN and the MLP baseline on val/test; writes metrics/eval.json",
    "report": "render reports/report.html (dataset, split audit, partition, metrics vs MLP, plots)",
}

def resources_path(stage: str) -> str:
    """Where dvc.yaml has ``stage`` record its run (``gnnpipe <stage> --resources``)."""
    return f"metrics/perf/stages/{stage}.json"
