"""Predictions on a new graph: the nodes of the user's tables scored by a model.pt alone
(``gnnpipe predict --model PATH --graph DIR --out FILE``; ``gnnpipe.load_model(path).predict``).

One path, the pipeline's own. The tables (the layout prepare reads, homogeneous or typed; the
format and column names the model was trained with, saved in model.pt: gnnpipe/io/models.py)
go through the prepare's block path (``gnnpipe.data.prepare_tables``, in this process) with the
model's edge policies, unlabelled (the label column is optional here and read on its own); they
go into a scratch folder as prepare, split and data/features would write them, with the model's
saved feature transform
(never one fitted on the new graph), every phase's message graph the whole new graph and every
node's role ``unused``; the predict stage's model inputs and forward then read them
(``read_model_inputs``, ``trained_outputs``: full or layer-wise, as train.inference says). The
scratch folder is removed at the end, after an error too (a killed run's is swept by the next
stage run: its temp name names the dead writer).

Nodes and edges the model never saw are scored like any other: a GNN's weights are per layer,
not per node. Refused in one line: a link-task model (this writes class predictions; the
predict stage writes a link model's embeddings), train.sampler sign (its hops come from the
propagate stage), a graph whose layout, node or edge types, or feature widths differ from the
model's, and a label value (the label column is optional) that is none of the model's classes.
Output: the predict stage's ``predictions.parquet`` columns (gnnpipe/io/predictions.py) under the
user's ids, ``role`` ``unused`` for every node (a new graph has no split).
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from gnnpipe import io
from gnnpipe.config import DatasetParams, TrainParams, replace
from gnnpipe.config.loading import section_from_dict
from gnnpipe.data.graph import HOMOGENEOUS, ROLE_CODES, UNLABELLED, Graph, edge_type_name
from gnnpipe.data.prepare_tables import prepare_tables
from gnnpipe.io.blocks import scratch_beside
from gnnpipe.io.common import PHASES
from gnnpipe.io.features import write_features
from gnnpipe.io.predictions import DEFAULT_TOP_K
from gnnpipe.sources import tables
from gnnpipe.sources.base import label_codes
from gnnpipe.sources.formats import CsvTables, ParquetTables
from gnnpipe.training.distributed import SINGLE
from gnnpipe.training.model_inputs import read_model_inputs
from gnnpipe.training.predict import node_prediction_blocks, trained_outputs

TABLE_FORMATS = ("parquet", "csv")
DEFAULT_BLOCK_ROWS = 65_536


@dataclasses.dataclass(frozen=True)
class SavedModel:
    """A ``gnnpipe.model/2`` file: its ``path``, ``meta``, ``inference`` part and the train
    and dataset sections it was trained with (``train``: TrainParams; ``dataset``:
    DatasetParams of the keys that shape a graph, the rest defaults)."""

    path: Path
    meta: dict
    inference: dict
    train: TrainParams
    dataset: DatasetParams

    @property
    def classes(self) -> pa.Array:
        """The user's label value of each class code (C,), int64 or string."""
        return pa.array(self.inference["classes"], pa.string() if self.inference["class_type"]
                        == "string" else pa.int64())


def read_saved(path: Path) -> SavedModel:
    """The model file at ``path`` (or in folder ``path``), checked for scoring a new graph:
    ``gnnpipe.model/2``, a node-classification model of a message-passing or row model."""
    where = io.model_file(path)
    payload = io.read_model_file(where, inference=True)
    meta, inference = payload["meta"], payload["inference"]
    params = inference["params"]
    try:
        train = section_from_dict(TrainParams, params.get("train", {}), "train")
        dataset = section_from_dict(DatasetParams, params.get("dataset", {}), "dataset")
    except ValueError as err:  # saved by another gnnpipe version: its keys are not ours
        raise ValueError(f"{where}: its saved params do not fit this gnnpipe ({err}); re-run "
                         "the train stage") from None
    if meta.get("task", dataset.task) != "node":
        raise ValueError(f"{where}: a {meta.get('task')}-prediction model; gnnpipe predict "
                         "--graph scores node-classification models (a link model's embeddings "
                         "come from the predict stage)")
    if meta.get("num_hops", 0):
        raise ValueError(f"{where}: train.sampler sign reads hops the propagate stage computed "
                         "on the training graph; score new graphs with a message-passing model")
    refuse_node_embeddings(train, where)
    return SavedModel(where, meta, inference, train, dataset)


def refuse_node_embeddings(train: TrainParams, where: Path) -> None:
    """HOOK for learnable per-node embeddings (``train.embeddings``): a new graph's nodes have
    no trained row, so a model that has such a table is refused here until the embeddings say
    how a node they never saw gets one (their rows travel in the state_dict)."""
    setting = getattr(train, "embeddings", None)
    enabled = getattr(setting, "dim", setting) if setting is not None else None
    if enabled not in (None, False, 0, "", "none"):
        raise ValueError(f"{where}: trained with train.embeddings (one learnt row per training "
                         "node); a new graph's nodes have none, so it cannot be scored here")


# ------------------------------------------------------------------------------------ reading
def table_format(saved: SavedModel, folder: Path) -> str:
    """The tables' format: the model's dataset.source when it read tables, else (a model of a
    built-in or downloaded source) parquet when the folder holds Parquet files, else csv."""
    if saved.dataset.source in TABLE_FORMATS:
        return saved.dataset.source
    return "parquet" if any(Path(folder).rglob("*.parquet")) else "csv"


def dataset_for(saved: SavedModel, folder: Path) -> DatasetParams:
    """The model's dataset keys, reading the tables in ``folder``."""
    return replace(saved.dataset, path=str(folder), source=table_format(saved, folder))


def prepare_graph(cfg: DatasetParams, target: str, saved: SavedModel, out: Path,
                  scratch: Path) -> Graph:
    """The tables prepared by blocks into ``out`` (``scratch``: an empty folder for the blocks)
    without labels (the link task's unlabelled read), features rounded to the dtype training
    read them in, inline or external past 1 GiB as prepare; the graph, memory-mapped."""
    typed = {} if cfg.layout == HOMOGENEOUS else {"typed": {"target": target,
                                                           "link_edge_type": ""}}
    unlabelled = replace(cfg, task="link", nodes={"label": ""}, storage={
        "feature_dtype": saved.inference["feature_dtype"], "compression": "none",
        "features": "auto"}, **typed)
    scratch.mkdir(parents=True)
    # now=True: in place at once, also inside a stage's publishing() (which defers the rest)
    with io.atomic_dir(out, now=True) as folder:
        prepare_tables(None, unlabelled, folder, scratch)
    return io.read_graph(out, mmap=True)


def label_column(cfg: DatasetParams, target: str) -> tuple[Path, pa.ChunkedArray | None]:
    """The ``target`` type's node table and its label column (None without one: labels are
    optional here)."""
    reader = ParquetTables() if cfg.source == "parquet" else CsvTables()
    path = (tables.table_folder(cfg) / (cfg.nodes.file or f"nodes.{cfg.source}")
            if cfg.layout == HOMOGENEOUS else tables.table_layout(cfg).paths[target])
    name = cfg.nodes.label
    if not name or name not in reader.schema(path).names:
        return path, None
    return path, reader.read(path, [name]).column(name)


def labels_in_classes(column: pa.ChunkedArray | None, num_nodes: int, path: Path,
                      cfg: DatasetParams, classes: pa.Array) -> np.ndarray:
    """Codes int64 (N,) of the model's ``classes`` for the label ``column`` (prepare's notion of
    a missing label: -1), or all -1 without one; one line for a value that is no class."""
    if column is None:
        return np.full(num_nodes, UNLABELLED, dtype=np.int64)
    name = cfg.nodes.label
    codes, values = label_codes(column, path, name, cfg.nodes.unlabeled_values, trainable=False)
    shown = ", ".join(str(v) for v in classes.to_pylist()[:10]) + (
        ", ..." if len(classes) > 10 else "")
    if len(values) and values.type != classes.type:
        raise ValueError(f"{path}: label column {name!r} holds {values.type} values, the model's "
                         f"classes are {classes.type} ({shown})")
    found = pc.index_in(values, value_set=classes).fill_null(-1).to_numpy(
        zero_copy_only=False).astype(np.int64)
    if (found < 0).any():
        value = values[int(np.argmax(found < 0))].as_py()
        raise ValueError(f"{path}: label column {name!r} has value {value!r}, which is not a "
                         f"class of the model ({shown}); labels are optional here: leave its "
                         "cells blank or drop the column")
    return np.where(codes >= 0, found[np.maximum(codes, 0)], UNLABELLED)


def check_matches(graph: Graph, featureless: list[str], saved: SavedModel, where: Path) -> None:
    """The graph's layout, node and edge types and feature widths (``featureless``: its types
    without feature columns) are the model's, else one line naming what differs."""
    wanted = saved.inference["graph"]
    given = {"node types": list(graph.node_types),
             "edge types": [edge_type_name(e) for e in graph.edge_types]}
    for what, names in given.items():
        model = wanted[what.replace(" ", "_")]
        if names != model:
            raise ValueError(f"{where}: the graph's {what} ({', '.join(names)}) are not the "
                             f"model's ({', '.join(model)}); dataset.undirected adds reverse "
                             "types, so give the relations the model was trained on")
    # a type's degree features and a feature column of the same width would pass unnoticed
    trained = wanted.get("featureless")
    if trained is not None and featureless != trained:
        raise ValueError(f"{where}: node types without feature columns here: "
                         f"{', '.join(featureless) or 'none'}; in the training tables: "
                         f"{', '.join(trained) or 'none'} (their features are degrees); give "
                         "each type the feature columns it had in training")
    for t, x in graph.x.items():
        width = saved.inference["feature_widths"][t]
        if int(x.shape[1]) != width:
            kind = f"node type {t!r} has" if graph.layout != HOMOGENEOUS else "the nodes have"
            raise ValueError(f"{where}: {kind} {int(x.shape[1])} features, the model reads "
                             f"{width} (dataset.nodes.features={saved.dataset.nodes.features!r})")


# ------------------------------------------------------------------------------------ scoring
@dataclasses.dataclass(frozen=True)
class Scored:
    """A new graph's target nodes scored: ``logits`` float32 (N, C), ``y`` int64 (N,) the
    model's class codes of the given labels (-1: none), ``ids`` the user's ids (N,),
    ``classes`` the model's label values (C,) and ``how`` (full | layerwise | rows)."""

    logits: torch.Tensor
    y: torch.Tensor
    ids: pa.Array
    classes: pa.Array
    how: str


def stage_inputs(args: SimpleNamespace, graph: Graph, saved: SavedModel) -> None:
    """The rest of the new graph's stage files beside ``args.prepared`` (module docstring): the
    saved feature transform and a split whose every phase sees the whole graph."""
    features = saved.inference["features"]
    with io.atomic_dir(args.features, now=True) as out:
        write_features(out, features["meta"]["kind"], features["node_types"],
                       typed=bool(features["meta"]["typed"]))
    unused = np.full(graph.num_nodes_dict[graph.target], ROLE_CODES["unused"], dtype=np.int8)
    with io.atomic_dir(args.split, now=True) as out:
        io.write_split(out, graph, {phase: graph.csr for phase in PHASES},
                       {"mode": "transductive"}, roles=unused)


def score(saved: SavedModel, graph_dir: Path, scratch: Path, block_rows: int) -> Scored:
    """Every target node of the tables in ``graph_dir`` scored by ``saved`` (module
    docstring); ``scratch``: an empty folder for the stage files."""
    cfg = dataset_for(saved, graph_dir)
    target = saved.inference["graph"]["target"]
    args = SimpleNamespace(**{name: scratch / name for name in
                              ("prepared", "split", "features", "propagate", "partition")})
    graph = prepare_graph(cfg, target, saved, args.prepared, scratch / "blocks")
    where, label = label_column(cfg, target)
    check_matches(graph, io.read_featureless(args.prepared), saved, where)
    classes = saved.classes
    y = labels_in_classes(label, graph.num_nodes_dict[target], where, cfg, classes)
    stage_inputs(args, graph, saved)
    inputs = read_model_inputs(args, saved.train, "node", phases=("test",))
    logits, _, how = trained_outputs(inputs, saved.path, SINGLE, len(classes), "target",
                                     {"num_classes": len(classes)}, block_rows)
    ids = io.read_typed_node_ids(args.prepared, target).column("original_id").combine_chunks()
    return Scored(logits.float(), torch.from_numpy(y), user_ids(ids), classes, how)


def user_ids(ids: pa.Array) -> pa.Array:
    """The id column as the predictions file types it: int64 or string."""
    return ids.cast(pa.int64() if pa.types.is_integer(ids.type) else pa.string())


@contextlib.contextmanager
def scratch_folder(out: Path | None) -> Iterator[Path]:
    """An empty folder beside ``out`` (the system temp folder without one), removed at exit."""
    if out is not None:
        with scratch_beside(Path(out)) as folder:
            yield folder
        return
    with tempfile.TemporaryDirectory(prefix="gnnpipe-predict-") as folder:
        yield Path(folder)


def prediction_blocks(scored: Scored, top_k: int, block_rows: int):
    """``predictions.parquet``'s schema and its blocks of rows (gnnpipe/io/predictions.py)."""
    k = min(top_k, len(scored.classes))
    roles = np.full(len(scored.ids), ROLE_CODES["unused"], dtype=np.int8)
    schema = io.predictions_schema(scored.ids.type, scored.classes.type)
    return schema, node_prediction_blocks(scored.logits, scored.y, roles, scored.ids,
                                          scored.classes, k, block_rows)


def predict_to_file(model: Path, graph_dir: Path, out: Path, *, top_k: int = DEFAULT_TOP_K,
                    block_rows: int = DEFAULT_BLOCK_ROWS) -> dict:
    """Write the predictions of the tables in ``graph_dir`` by ``model`` to the Parquet file
    ``out`` (atomically: a failure leaves ``out`` as it was); returns counts for the summary."""
    saved = read_saved(model)
    graph_dir, out = Path(graph_dir), Path(out)
    if not graph_dir.is_dir():
        raise ValueError(f"--graph {graph_dir}: not a folder; give the folder of the node and "
                         "edge tables (the layout prepare reads)")
    if out.is_dir():
        raise ValueError(f"--out {out}: is a folder; give the Parquet file to write")
    with scratch_folder(out) as scratch:
        scored = score(saved, graph_dir, scratch, block_rows)
    schema, blocks = prediction_blocks(scored, top_k, block_rows)
    with io.atomic_path(out) as tmp:
        rows = io.write_blocks(tmp, schema, io.PREDICTIONS, blocks)
    labelled = int((scored.y != UNLABELLED).sum())
    return {"rows": rows, "labelled": labelled, "classes": len(scored.classes), "how": scored.how}


class Model:
    """A trained model.pt for Python: ``gnnpipe.load_model(path).predict(tables)``."""

    def __init__(self, path: Path):
        self.saved = read_saved(Path(path))

    @property
    def classes(self) -> list:
        return self.saved.inference["classes"]

    def predict(self, graph, *, top_k: int = DEFAULT_TOP_K,
                block_rows: int = DEFAULT_BLOCK_ROWS) -> pa.Table:
        """Predictions (``predictions.parquet``'s columns) of every target node of ``graph``: a
        folder of tables (the layout prepare reads), or a mapping of table names to Arrow
        tables, e.g. ``{"nodes": ..., "edges": ...}`` (typed: ``{"nodes/paper": ...,
        "edges/paper__cites__paper": ...}``), read as Parquet files of those names."""
        saved = self.saved
        with scratch_folder(None) as scratch:
            folder = Path(graph) if not isinstance(graph, dict) else write_tables(
                scratch / "tables", graph)
            if isinstance(graph, dict):
                saved = dataclasses.replace(saved, dataset=replace(saved.dataset,
                                                                   source="parquet"))
            (scratch / "stage").mkdir()
            try:
                scored = score(saved, folder, scratch / "stage", block_rows)
            except ValueError as err:  # name the given table, not the removed scratch copy
                if not isinstance(graph, dict):
                    raise
                named = str(err).replace(f"{folder}/", "").replace(str(folder), "the tables")
                raise ValueError(named) from None
        schema, blocks = prediction_blocks(scored, top_k, block_rows)
        return pa.Table.from_batches(
            [pa.record_batch([block[f.name] for f in schema], schema=schema) for block in blocks],
            schema=schema)


def write_tables(folder: Path, given: dict) -> Path:
    """``given`` (table name -> Arrow table) as ``<name>.parquet`` files under ``folder``."""
    for name, table in given.items():
        path = folder / f"{name}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table if isinstance(table, pa.Table) else pa.table(table), path)
    return folder


def load_model(path) -> Model:
    """The model.pt at ``path`` (or in folder ``path``), ready to score new graphs."""
    return Model(Path(path))
