"""What the predict stage computes and how it turns into Arrow blocks (gnnpipe/io/predictions.py).

Every node is scored with the trained weights on the message graph the test phase scores on
(``train.inference`` decides full forward or layer by layer; gnnpipe/training/inference.py), and the
input of the model's last layer is kept on the way as the node's embedding
(``gnnpipe.training.models.forward_with_hidden``). Per-node outputs are converted one block of
``predict.block_rows`` rows at a time, so no second full copy of the logits or embeddings
exists as Arrow, and the user ids beside them are read from data/prepared as they are written
(``read_node_ids_of``): no (N,) column of them is held. Candidate pairs of ``predict.pairs``
are mapped from the user's ids to node ids with one vectorized lookup (every id read, then),
refused in one line when any id is unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import torch
from torch import nn

from gnnpipe import io
from gnnpipe.training.distributed import SINGLE, DistContext
from gnnpipe.data.graph import HOMOGENEOUS, TYPED, UNLABELLED
from gnnpipe.data.ids import blanks_as_nulls, to_id_type
from gnnpipe.io.predictions import StreamedIds
from gnnpipe.reporting.collapse import collapse
from gnnpipe.training.inference import layerwise_logits
from gnnpipe.training.link_train import pair_scores
from gnnpipe.training.models import forward_with_hidden
from gnnpipe.training.train import PhaseInput


def row_blocks(num_rows: int, block_rows: int) -> Iterator[tuple[int, int]]:
    """``[a, b)`` ranges of at most ``block_rows`` rows covering ``[0, num_rows)``."""
    for a in range(0, num_rows, block_rows):
        yield a, min(a + block_rows, num_rows)


@torch.no_grad()
def rows_forward(forward: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
                 x: torch.Tensor, block_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A row model (mlp, sign) over ``x`` (N, D) in row blocks: (output, hidden)."""
    outs, hiddens = [], []
    for a, b in row_blocks(x.shape[0], block_rows):
        out, hidden = forward(x[a:b].float())
        outs.append(out)
        hiddens.append(hidden)
    return torch.cat(outs), torch.cat(hiddens)


def top_k(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax probabilities of the ``k`` most probable classes, (B, k) float32 descending,
    and their class codes (B, k) int64."""
    probs = torch.softmax(logits.float(), dim=1)
    values, codes = torch.topk(probs, k, dim=1, largest=True, sorted=True)
    return values, codes


def _lists(values: pa.Array, width: int) -> pa.ListArray:
    """``values`` (B * width,) as B lists of ``width`` entries."""
    rows = len(values) // width if width else 0
    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, values)


def node_prediction_blocks(logits: torch.Tensor, y: torch.Tensor, roles: np.ndarray,
                           original_ids: pa.Array, classes: pa.Array, k: int,
                           block_rows: int) -> Iterator[dict[str, pa.Array]]:
    """The columns of ``predictions.parquet`` (gnnpipe/io/predictions.py), one block of rows at
    a time: ``logits`` (N, C), ``y`` int64 (N,) codes or -1, ``roles`` int8 (N,) role codes
    (``gnnpipe.data.graph.ROLE_CODES``; named a block at a time), the user's ``original_ids``
    (N,) and label values ``classes`` (C,). ``predicted`` is ``top_labels[0]``."""
    k = min(k, logits.shape[1])
    for a, b in row_blocks(logits.shape[0], block_rows):
        probs, codes = top_k(logits[a:b], k)
        codes_np = codes.numpy()
        labels = y[a:b].numpy()
        yield {
            "node_id": pa.array(np.arange(a, b, dtype=np.int64)),
            "original_id": original_ids.slice(a, b - a),
            "role": io.role_names(roles[a:b]),
            "label": classes.take(pa.array(labels, mask=labels == UNLABELLED)),
            "predicted": classes.take(pa.array(codes_np[:, 0])),
            "top_labels": _lists(classes.take(pa.array(codes_np.reshape(-1))), k),
            "top_probs": _lists(pa.array(probs.numpy().reshape(-1), pa.float32()), k),
        }


def embedding_blocks(hidden: torch.Tensor, original_ids: pa.Array, dtype: str,
                     block_rows: int) -> Iterator[dict[str, pa.Array]]:
    """The columns of ``embeddings.parquet``: ``hidden`` (N, H) rounded to ``dtype`` (float32
    | float16) one block at a time."""
    numpy_dtype = np.float16 if dtype == "float16" else np.float32
    dim = hidden.shape[1]
    for a, b in row_blocks(hidden.shape[0], block_rows):
        values = hidden[a:b].float().numpy().astype(numpy_dtype, copy=False).reshape(-1)
        yield {"node_id": pa.array(np.arange(a, b, dtype=np.int64)),
               "original_id": original_ids.slice(a, b - a),
               "embedding": pa.FixedSizeListArray.from_arrays(pa.array(values), dim)}


def default_ids(num_nodes: int) -> pa.Array:
    """``original_id`` of a source without user ids: the node id itself."""
    return pa.array(np.arange(num_nodes, dtype=np.int64))


class RangeIds:
    """``default_ids(num_nodes)`` made a block at a time (``slice`` as ``pa.Array.slice``):
    no (N,) column of ids that are the row numbers."""

    type = pa.int64()

    def __init__(self, num_nodes: int):
        self._rows = num_nodes

    def __len__(self) -> int:
        return self._rows

    def slice(self, offset: int, length: int) -> pa.Array:
        return pa.array(np.arange(offset, min(offset + length, self._rows), dtype=np.int64))


# ------------------------------------------------------------------------------------ pairs
def read_pairs(path: Path, id_types: tuple[pa.DataType, pa.DataType], where: str
               ) -> tuple[pa.Array, pa.Array]:
    """``src`` and ``dst`` of a Parquet or CSV file, as the id types of the graph. CSV cells are
    read as text and meet integer ids only when written canonically (``gnnpipe.data.ids``: ``00042``
    is not node 42, and is refused in one line naming it)."""
    if path.is_dir():
        raise ValueError(f"{where}: is a directory; expected a .parquet or .csv file")
    if not path.is_file():
        raise ValueError(f"{where}: file not found")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            table = pq.read_table(path)
        elif path.suffix.lower() in (".csv", ".tsv") or path.name.endswith((".csv.gz", ".tsv.gz")):
            delimiter = "\t" if ".tsv" in path.name.lower() else ","
            table = pacsv.read_csv(
                path, parse_options=pacsv.ParseOptions(delimiter=delimiter),
                convert_options=pacsv.ConvertOptions(
                    column_types={"src": pa.string(), "dst": pa.string()}))
        else:
            raise ValueError(f"{where}: expected a .parquet or .csv file")
    except (pa.ArrowInvalid, OSError) as err:
        reason = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise ValueError(f"{where}: not a readable table ({reason})") from None
    missing = [c for c in ("src", "dst") if c not in table.column_names]
    if missing:
        raise ValueError(f"{where}: missing column {missing[0]!r} (needs src, dst of user ids)")
    columns = []
    for name, id_type in zip(("src", "dst"), id_types):
        given = blanks_as_nulls(table.column(name).combine_chunks())
        try:
            column, foreign = to_id_type(given, id_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise ValueError(f"{where}: column {name!r} is {given.type}, the graph's ids "
                             f"are {id_type}") from None
        if foreign is not None:  # text no integer id can equal: "00042" is not node 42
            row = int(np.argmax(foreign))
            raise ValueError(f"{where}: column {name!r} has id {given[row].as_py()!r} (row "
                             f"{row}; {int(foreign.sum())} such rows), which names no node: the "
                             f"graph's ids are integers, written without leading zeros, signs "
                             f"or spaces")
        columns.append(column)
    return columns[0], columns[1]


def lookup(values: pa.Array, original_ids: pa.Array) -> np.ndarray:
    """Node id of each of ``values`` in ``original_ids`` (row i = node i), -1 when unknown
    (also for nulls). One hash lookup, no Python loop."""
    found = pc.index_in(values, value_set=original_ids)
    return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def map_pairs(src: pa.Array, dst: pa.Array, src_ids: pa.Array, dst_ids: pa.Array,
              where: str) -> tuple[np.ndarray, np.ndarray]:
    """Node ids of the pairs; one line naming the count and the first unknown id otherwise."""
    s, d = lookup(src, src_ids), lookup(dst, dst_ids)
    bad = (s < 0) | (d < 0)
    if bad.any():
        row = int(np.argmax(bad))
        value = src[row] if s[row] < 0 else dst[row]
        raise ValueError(f"{where}: {int(bad.sum())} of {bad.size} pairs name unknown node ids "
                         f"(first: row {row}, id {value.as_py()!r})")
    return s, d


def pair_score_blocks(z: torch.Tensor, s: np.ndarray, d: np.ndarray, src: pa.Array,
                      dst: pa.Array, block_rows: int) -> Iterator[dict[str, pa.Array]]:
    """``score`` = the link decoder's logit ``z_s . z_d``
    (``gnnpipe.training.link_train.pair_scores``) and ``prob`` = its sigmoid, for node ids
    ``s``/``d`` with the user's ``src``/``dst``."""
    for a, b in row_blocks(s.size, block_rows):
        score = pair_scores(z, torch.from_numpy(s[a:b]), torch.from_numpy(d[a:b])).float()
        yield {"src": src.slice(a, b - a), "dst": dst.slice(a, b - a),
               "score": pa.array(score.numpy(), pa.float32()),
               "prob": pa.array(torch.sigmoid(score).numpy(), pa.float32())}


@torch.no_grad()
def held_out_collapse(z: torch.Tensor, split: Path, graph) -> dict:
    """How collapsed the link scores of the predict stage's embeddings ``z`` (N, H; a type's
    rows from ``graph.offsets()``) are on the split's test positives against their fixed
    negatives (``gnnpipe.reporting.collapse.collapse``): predict.json's ``collapse``, the
    figures train and evaluate record, measured on what predict wrote."""
    edge_type, edges, negatives = io.read_typed_link_split(split, graph)
    offsets = graph.offsets()
    heads = edges["test"][0] + offsets[edge_type[0]]
    z = z.float()
    pos = pair_scores(z, heads, edges["test"][1] + offsets[edge_type[2]])
    neg = pair_scores(z, heads, negatives["test"] + offsets[edge_type[2]])
    return collapse(pos.numpy(), neg.numpy())


def label_counts(y: torch.Tensor) -> dict[str, int]:
    labelled = int((y != UNLABELLED).sum())
    return {"labelled": labelled, "unlabelled": int(y.numel()) - labelled}


def load_model(model: nn.Module, saved: dict, expect: dict, where: Path) -> nn.Module:
    """``model`` in eval mode with the ``saved`` weights of ``where`` (model.pt, as
    ``io.read_model_file`` reads it), after checking its meta against ``expect`` (what params
    build): a stale model.pt names the mismatch in one line."""
    state, meta = saved["state_dict"], saved["meta"]
    for key, want in expect.items():
        if key in meta and meta[key] != want:
            raise ValueError(f"{where}: trained with {key}={meta[key]!r}, params give {want!r}; "
                             "re-run the train stage")
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0][:200]
        raise ValueError(f"{where}: the weights do not fit the model the train section builds "
                         f"({first}); re-run the train stage") from None
    return model.eval()


def model_outputs(model: nn.Module, phase: PhaseInput, ctx: DistContext, block_rows: int):
    """(output, hidden, how) of ``model`` on one phase's inputs: layer by layer over target
    blocks when the phase plans it (every rank computes its blocks: the rows of one process),
    else on rank 0 alone in blocks of ``block_rows`` rows (row models: mlp, sign) or one
    whole-graph forward. ``hidden``: the input of the last layer ((N, H), or type -> (N_t, H)).
    Output and hidden are None on the other ranks."""
    hidden_of = getattr(model, "forward_with_hidden", None) or partial(forward_with_hidden, model)
    if phase.layerwise is not None:
        phase.layerwise.aligned = True  # ranks take whole blocks of one process's cut: its bytes
        phase.layerwise.reuse = False  # one call: no gathered block is kept past its last read
        out, hidden = layerwise_logits(model, phase.x, phase.layerwise, ctx, with_hidden=True)
        return (out, hidden, "layerwise") if ctx.is_main else (None, None, "layerwise")
    if not ctx.is_main:
        return None, None, "full"
    if phase.edge_index is None:
        return (*rows_forward(hidden_of, phase.x, block_rows), "rows")
    with torch.no_grad():
        return (*hidden_of(phase.x, phase.edge_index), "full")


def read_classes_of(prepared: Path, num_classes: int) -> tuple[pa.Array, str]:
    """The user's label value of each code, and where it came from."""
    if not (Path(prepared) / "classes.parquet").exists():  # a graph prepared before classes
        return pa.array(np.arange(num_classes, dtype=np.int64)), "codes"
    classes = io.read_classes(prepared)
    if len(classes) != num_classes:
        raise ValueError(f"{Path(prepared) / 'classes.parquet'}: {len(classes)} classes, the "
                         f"graph has {num_classes}; re-run the prepare stage")
    return classes, "classes.parquet"


def trained_outputs(inputs, model_dir: Path, ctx: DistContext, out_dim: int, out: str,
                    expect: dict, block_rows: int):
    """(output, hidden, how) of the model trained into ``model_dir`` (data/model, or a
    model.pt itself) on the test phase's ``inputs`` (``gnnpipe.training.model_inputs.ModelInputs``;
    ``out_dim`` / ``out`` rebuild it, ``expect``: the meta it must have been trained with); typed
    graphs run on rank 0 alone. (None, None, how) on the other ranks."""
    model = load_model(inputs.model(out_dim, out), io.read_model_file(model_dir),
                       inputs.meta(expect), io.model_file(model_dir))
    typed = inputs.graph.layout == TYPED
    if typed and not ctx.is_main:
        return None, None, "full"
    return model_outputs(model, inputs.phases["test"], SINGLE if typed else ctx, block_rows)


def read_node_ids_of(prepared: Path, graph, whole: bool = False) -> dict:
    """Node type -> ``original_id`` of its every node in ``prepared``: the user's ids when the
    source had them, else 0..N-1. Read a block at a time as the writers slice them
    (``StreamedIds``, ``RangeIds``: ``len``, ``type``, ``slice``), so no (N,) column is held;
    ``whole``: one (N_t,) ``pa.Array`` each (a lookup of candidate pairs needs them all)."""
    ids = {}
    for t, num_nodes in graph.num_nodes_dict.items():
        path = prepared / io.node_ids_file(t)
        if not path.exists():
            ids[t] = default_ids(num_nodes) if whole else RangeIds(num_nodes)
        elif not whole:
            ids[t] = StreamedIds(prepared, t, num_nodes)
        else:
            ids[t] = io.read_typed_node_ids(prepared, t).column("original_id").combine_chunks()
        if len(ids[t]) != num_nodes:
            raise ValueError(f"{path}: {len(ids[t])} ids for {num_nodes} nodes; re-run the "
                             "prepare stage")
    return ids


def write_embeddings(out: Path, graph, node_type: str, hidden: torch.Tensor, ids: pa.Array,
                     pcfg) -> None:
    """embeddings.parquet (a typed ``graph``'s: embeddings_<type>.parquet) of ``hidden`` (N, H)
    under ``ids`` (``pcfg``: PredictParams: dtype, block rows)."""
    name = ("embeddings.parquet" if graph.layout == HOMOGENEOUS
            else f"embeddings_{node_type}.parquet")
    io.write_blocks(out / name, io.embeddings_schema(
        ids.type, io.EMBEDDING_TYPES[pcfg.embedding_dtype], int(hidden.shape[1])),
        io.EMBEDDINGS, embedding_blocks(hidden, ids, pcfg.embedding_dtype, pcfg.block_rows))


def candidate_pairs(name: str, pairs_dir: Path, src_ids: pa.Array, dst_ids: pa.Array):
    """The candidate pairs of ``predict.pairs`` ``name`` (user ids, node ids), or None
    without; the file must lie under ``pairs_dir`` (what dvc.yaml tracks)."""
    if not name:
        return None
    where = f"predict.pairs {name}"
    if not Path(name).resolve().is_relative_to(Path(pairs_dir).resolve()):
        raise ValueError(f"{where}: put the file under {pairs_dir}/ (dvc.yaml tracks that "
                         "folder, so editing the pairs re-runs predict; a file elsewhere would "
                         "go stale unnoticed)")
    src, dst = read_pairs(Path(name), (src_ids.type, dst_ids.type), where)
    s, d = map_pairs(src, dst, src_ids, dst_ids, where)
    return src, dst, s, d


def prediction_metrics(graph, ctx: DistContext, per_type: dict, payload: dict) -> dict:
    """predict.json: ``payload`` and the world size; a typed graph's gives each type's
    embedding rows (``per_type``: type -> (N_t, H)) and, node task, the node type instead."""
    if graph.layout == HOMOGENEOUS:
        return {**payload, "world_size": ctx.world_size}
    node_type = {"node_type": graph.target} if payload["task"] == "node" else {}
    return {**payload, **node_type,
            "embedding_rows": {t: int(h.shape[0]) for t, h in per_type.items()}}


def embeddings_line(per_type: dict) -> str:
    """What the result line says of the embeddings (type -> (N_t, D)): their width, and the
    types when there are several."""
    width = int(next(iter(per_type.values())).shape[1])
    types = f" for {len(per_type)} node types" if len(per_type) > 1 else ""
    return f"embeddings of width {width}{types}"
