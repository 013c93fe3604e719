"""predict: every node scored with the trained model, into data/predict/*.parquet.

Each node is predicted on the message graph the test phase scores on (node task: the whole
graph, transductive or inductive; link task: the training + val edges, without the held-out
test edges), with the weights of data/model rebuilt from the train section. Node task:
predictions.parquet (every node, unlabelled ones included: the user's id, split role, true and
predicted label in the user's values, top-k probabilities) and embeddings.parquet (the input
of the model's last layer). Link task: embeddings.parquet (the encoder output the decoder
dots) and, with predict.pairs, pair_scores.parquet. Typed graphs: predictions of the target
type and embeddings_<type>.parquet per node type. train.inference picks layer-wise inference
for big graphs; with train.dist.nproc * nnodes > 1 the stage re-launches under torchrun and
the ranks split the layer-wise target blocks (the output is byte-identical to one process).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gnnpipe import distributed, io
from gnnpipe.commands.inputs import lazy_model_features, model_features, read_typed
from gnnpipe.commands.variant import HOMOGENEOUS, TYPED, pick, split_variant
from gnnpipe.config import load_params, samplers
from gnnpipe.hetero.inputs import phase_inputs
from gnnpipe.hetero.models import build_hetero_model
from gnnpipe.inference import csr_view, layerwise_logits, plan
from gnnpipe.io import hetero as hio
from gnnpipe.io.hetero import read_hetero_roles
from gnnpipe.models import build_model, forward_with_hidden
from gnnpipe.predict import (
    default_ids,
    embedding_blocks,
    label_counts,
    map_pairs,
    node_prediction_blocks,
    pair_score_blocks,
    read_pairs,
    rows_forward,
)
from gnnpipe.typed_graph import edge_type_name, parse_edge_type

HELP = "predict every node (unlabelled too) and export embeddings into data/predict"


def run(args):
    """Picks the variant, re-launches under torchrun when train.dist.nproc * nnodes > 1 and
    runs the variant on every rank; rank 0 writes."""
    params = load_params(args.params)
    kind, task = split_variant(args.split)
    predict = pick(RUNS, kind, task, "predict")
    dist = params.train.dist
    with distributed.stage_ranks(args, params, "prediction") as ctx:
        if ctx is None:  # this process launched the ranks under torchrun; they are done
            return f"predicted on {dist.world_size} processes -> {args.out}"
        return predict(args, params, ctx)


# ----------------------------------------------------------------------------------- shared
def _classes(prepared: Path, num_classes: int) -> tuple[pa.Array, str]:
    """The user's label value of each code, and where it came from."""
    if not (Path(prepared) / "classes.parquet").exists():  # a graph prepared before classes
        return pa.array(np.arange(num_classes, dtype=np.int64)), "codes"
    classes = io.read_classes(prepared)
    if len(classes) != num_classes:
        raise ValueError(f"{Path(prepared) / 'classes.parquet'}: {len(classes)} classes, the "
                         f"graph has {num_classes}; re-run the prepare stage")
    return classes, "classes.parquet"


def _ids(path: Path, read, num_nodes: int) -> pa.Array:
    """``original_id`` of every node: the user's ids when the source had them, else 0..N-1."""
    if not path.exists():
        return default_ids(num_nodes)
    ids = read().column("original_id").combine_chunks()
    if len(ids) != num_nodes:
        raise ValueError(f"{path}: {len(ids)} ids for {num_nodes} nodes; re-run the prepare "
                         "stage")
    return ids


def _load(model: torch.nn.Module, args, saved: tuple[dict, dict], expect: dict
          ) -> torch.nn.Module:
    """``model`` with the ``saved`` weights of ``args.model``/model.pt (``io.read_model``),
    after checking their meta against what params build (a stale model.pt names the mismatch
    in one line)."""
    state, meta = saved
    where = Path(args.model) / "model.pt"
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


def _write_metrics(args, payload: dict) -> None:
    io.write_json(args.metrics, payload)


def _embedding_file(out: Path, name: str, hidden: torch.Tensor, ids: pa.Array, pcfg) -> None:

    io.write_blocks(out / name, io.embeddings_schema(ids.type,
                                                     io.EMBEDDING_TYPES[pcfg.embedding_dtype],
                                                     int(hidden.shape[1])),
                    io.EMBEDDINGS, embedding_blocks(hidden, ids, pcfg.embedding_dtype,
                                                    pcfg.block_rows))


def _pairs(args, params, src_ids: pa.Array, dst_ids: pa.Array):
    """The candidate pairs of ``predict.pairs`` (user ids, node ids), or None without."""
    name = params.predict.pairs
    if not name:
        return None
    where = f"predict.pairs {name}"
    if not Path(name).resolve().is_relative_to(Path(args.pairs_dir).resolve()):
        raise ValueError(f"{where}: put the file under {args.pairs_dir}/ (dvc.yaml tracks that "
                         "folder, so editing the pairs re-runs predict; a file elsewhere would "
                         "go stale unnoticed)")
    src, dst = read_pairs(Path(name), (src_ids.type, dst_ids.type), where)
    s, d = map_pairs(src, dst, src_ids, dst_ids, where)
    return src, dst, s, d


def _pair_file(out: Path, z: torch.Tensor, pairs, block_rows: int) -> int:

    src, dst, s, d = pairs
    return io.write_blocks(out / "pair_scores.parquet",
                           io.pair_scores_schema(src.type, dst.type), io.PAIR_SCORES,
                           pair_score_blocks(z, s, d, src, dst, block_rows))


def _homogeneous_outputs(args, params, ctx, graph, num_out: int, meta_expect: dict):
    """(output (N, num_out), hidden (N, H), how) of the train section's model on the test
    phase's inputs; (None, None, how) on ranks other than 0."""

    cfg, pcfg = params.train, params.predict
    saved = io.read_model(args.model)
    num_hops = 0
    engine, edge_index = None, None
    precomputed = samplers.needs(cfg.sampler, "propagate")  # sign: hops of each phase's graph
    if precomputed:
        hops = io.read_propagated(args.propagate)["test"]
        num_hops = len(hops) - 1
        x = torch.cat([h.float() for h in hops], dim=1)
        in_dim = graph.x.shape[1]
    else:  # as train read them: rows per block of the mapped file, or the whole matrix
        x = (lazy_model_features(args, graph.x) if samplers.out_of_core(cfg) else
             model_features(args, graph.x.float()))
        in_dim = x.shape[1]
        if cfg.model != "mlp":
            csr = io.read_message_graphs(args.split, graph.num_nodes)["test"]
            engine = plan(*csr_view(csr), in_dim, cfg)
            if engine is None:
                edge_index = csr.edge_index()
            else:
                engine.aligned = True  # ranks take whole blocks: the output of one process
    model = _load(build_model(cfg.model, in_dim, num_out, cfg, num_hops), args, saved,
                  {**meta_expect, "model": cfg.model, "in_dim": in_dim, "num_hops": num_hops})
    if engine is not None:  # every rank computes its blocks; all end with every row
        out, hidden = layerwise_logits(model, x, engine, ctx, with_hidden=True)
        how = "layerwise"
    elif not ctx.is_main:  # a full forward or row blocks: rank 0 alone
        return None, None, "full"
    elif edge_index is None:  # row models: blocks of rows
        fwd = model.forward_with_hidden if precomputed else (
            lambda rows: forward_with_hidden(model, rows))
        out, hidden = rows_forward(fwd, x, pcfg.block_rows)
        how = "rows"
    else:
        with torch.no_grad():
            out, hidden = forward_with_hidden(model, x.float(), edge_index)
        how = "full"
    if not ctx.is_main:
        return None, None, how
    return out.float(), hidden.float(), how


# ---------------------------------------------------------------------------------- variants
def predict_nodes(args, params, ctx):

    pcfg = params.predict
    graph = io.read_graph(args.prepared, mmap=True, stored_x=True)  # x: _homogeneous_outputs
    classes, class_source = _classes(args.prepared, graph.num_classes)
    ids = _ids(args.prepared / "node_ids.parquet", lambda: io.read_node_ids(args.prepared),
               graph.num_nodes)
    roles = io.read_split_roles(args.split)
    if roles.size != graph.num_nodes:
        raise ValueError(f"{args.split / 'nodes.parquet'}: {roles.size} roles for "
                         f"{graph.num_nodes} nodes; re-run the split stage")
    logits, hidden, how = _homogeneous_outputs(args, params, ctx, graph, graph.num_classes,
                                               {"num_classes": graph.num_classes})
    if not ctx.is_main:
        return None
    k = min(pcfg.top_k, graph.num_classes)
    with io.atomic_dir(args.out) as out:
        io.write_blocks(out / "predictions.parquet",
                        io.predictions_schema(ids.type, classes.type), io.PREDICTIONS,
                        node_prediction_blocks(logits, graph.y, roles, ids, classes, k,
                                               pcfg.block_rows))
        _embedding_file(out, "embeddings.parquet", hidden, ids, pcfg)
    counts = label_counts(graph.y)
    _write_metrics(args, {
        "task": "node", "rows": graph.num_nodes, **counts, "classes": graph.num_classes,
        "top_k": k, "embedding_dim": int(hidden.shape[1]),
        "embedding_dtype": pcfg.embedding_dtype, "inference": how, "message_graph": "test",
        "label_values": class_source, "world_size": ctx.world_size,
        "roles": {r: int((roles == r).sum()) for r in ("train", "val", "test", "unused")}})
    return (f"{graph.num_nodes} nodes predicted ({counts['unlabelled']} unlabelled), "
            f"embeddings of width {hidden.shape[1]} -> {args.out}")


def predict_links(args, params, ctx):
    pcfg, cfg = params.predict, params.train
    graph = io.read_graph(args.prepared, mmap=True, stored_x=True)  # x: _homogeneous_outputs
    ids = _ids(args.prepared / "node_ids.parquet", lambda: io.read_node_ids(args.prepared),
               graph.num_nodes)
    pairs = _pairs(args, params, ids, ids)  # refused before anything is computed or written
    z, _, how = _homogeneous_outputs(args, params, ctx, graph, cfg.hidden,
                                     {"embedding_dim": cfg.hidden})
    if not ctx.is_main:
        return None
    with io.atomic_dir(args.out) as out:
        _embedding_file(out, "embeddings.parquet", z, ids, pcfg)
        scored = 0 if pairs is None else _pair_file(out, z, pairs, pcfg.block_rows)
    _write_metrics(args, {"task": "link", "rows": graph.num_nodes,
                          "embedding_dim": int(z.shape[1]),
                          "embedding_dtype": pcfg.embedding_dtype, "inference": how,
                          "message_graph": "test", "pairs": scored,
                          "world_size": ctx.world_size})
    return (f"{graph.num_nodes} node embeddings"
            + (f", {scored} pairs scored" if pairs is not None else "") + f" -> {args.out}")


def _typed_outputs(args, params, typed, out_dim: int, out_kind: str):
    """(output, hidden type -> (N_t, H), how) of the typed model on the test phase's graph."""
    cfg, graph = params.train, typed.graph
    x = {t: model_features(args, v, t) for t, v in graph.x.items()}
    inputs = phase_inputs(graph, typed.graphs, cfg)["test"]

    expect = {"model": cfg.model, "target": graph.target,
              "node_types": ",".join(graph.node_types),
              "edge_types": ",".join(edge_type_name(e) for e in graph.edge_types)}
    dims = {t: int(v.shape[1]) for t, v in x.items()}
    model = _load(build_hetero_model(cfg.model, graph.metadata(), dims, out_dim, graph.target,
                                     cfg, out=out_kind), args, io.read_model(args.model), expect)
    if inputs.layerwise is not None:
        out, hidden = layerwise_logits(model, x, inputs.layerwise, with_hidden=True)
        return out, hidden, "layerwise"
    with torch.no_grad():
        out, hidden = model.forward_with_hidden(x, inputs.edge_index)
    return out, hidden, "full"


def _typed_ids(args, graph, node_type: str) -> pa.Array:

    return _ids(args.prepared / f"node_ids_{node_type}.parquet",
                lambda: hio.read_hetero_node_ids(args.prepared, node_type),
                graph.num_nodes(node_type))


def predict_typed_nodes(args, params, ctx):
    """Typed graphs run on rank 0 alone (the other ranks of a DDP launch have nothing to do)."""
    if not ctx.is_main:
        return None
    pcfg = params.predict
    typed = read_typed(args)
    graph = typed.graph
    classes, class_source = _classes(args.prepared, graph.num_classes)
    roles = read_hetero_roles(args.split, graph)
    ids = {t: _typed_ids(args, graph, t) for t in graph.node_types}
    logits, hidden, how = _typed_outputs(args, params, typed, graph.num_classes, "target")
    k = min(pcfg.top_k, graph.num_classes)
    with io.atomic_dir(args.out) as out:
        io.write_blocks(out / "predictions.parquet",
                        io.predictions_schema(ids[graph.target].type, classes.type),
                        io.PREDICTIONS,
                        node_prediction_blocks(logits.float(), graph.y, roles, ids[graph.target],
                                               classes, k, pcfg.block_rows))
        for t in graph.node_types:
            if t in hidden:  # sage: a type without in-edges drops out (as to_hetero)
                _embedding_file(out, f"embeddings_{t}.parquet", hidden[t].float(), ids[t], pcfg)
    counts = label_counts(graph.y)
    _write_metrics(args, {
        "task": "node", "hetero": True, "node_type": graph.target,
        "rows": graph.num_nodes(graph.target), **counts, "classes": graph.num_classes,
        "top_k": k, "embedding_dim": int(next(iter(hidden.values())).shape[1]),
        "embedding_dtype": pcfg.embedding_dtype, "inference": how, "message_graph": "test",
        "label_values": class_source,
        "embedding_rows": {t: int(h.shape[0]) for t, h in hidden.items()},
        "roles": {r: int((roles == r).sum()) for r in ("train", "val", "test", "unused")}})
    return (f"{graph.num_nodes(graph.target)} {graph.target} nodes predicted, embeddings of "
            f"{len(hidden)} node types -> {args.out}")


def predict_typed_links(args, params, ctx):

    if not ctx.is_main:
        return None
    pcfg, cfg = params.predict, params.train
    typed = read_typed(args)
    graph = typed.graph
    edge_type = parse_edge_type(hio.read_hetero_split_meta(args.split)["edge_type"])
    ids = {t: _typed_ids(args, graph, t) for t in graph.node_types}
    pairs = _pairs(args, params, ids[edge_type[0]], ids[edge_type[2]])
    z, _, how = _typed_outputs(args, params, typed, cfg.hidden, "all")
    offsets = graph.offsets()
    if pairs is not None:  # the decoder dots rows of the homogeneous view (offsets)
        src, dst, s, d = pairs
        pairs = src, dst, s + offsets[edge_type[0]], d + offsets[edge_type[2]]
    with io.atomic_dir(args.out) as out:
        for t in graph.node_types:
            n = graph.num_nodes(t)
            _embedding_file(out, f"embeddings_{t}.parquet",
                            z[offsets[t]:offsets[t] + n].float(), ids[t], pcfg)
        scored = 0 if pairs is None else _pair_file(out, z.float(), pairs, pcfg.block_rows)

    _write_metrics(args, {"task": "link", "hetero": True, "edge_type": edge_type_name(edge_type),
                          "rows": graph.total_nodes, "embedding_dim": int(z.shape[1]),
                          "embedding_dtype": pcfg.embedding_dtype, "inference": how,
                          "message_graph": "test", "pairs": scored,
                          "embedding_rows": {t: graph.num_nodes(t) for t in graph.node_types}})
    return (f"embeddings of {len(graph.node_types)} node types"
            + (f", {scored} pairs scored" if pairs is not None else "") + f" -> {args.out}")


RUNS = {(HOMOGENEOUS, "node"): predict_nodes, (HOMOGENEOUS, "link"): predict_links,
        (TYPED, "node"): predict_typed_nodes, (TYPED, "link"): predict_typed_links}
