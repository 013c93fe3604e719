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

from gnnpipe import io
from gnnpipe.training import distributed
from gnnpipe.commands.variant import split_task
from gnnpipe.config import load_params
from gnnpipe.training.distributed import SINGLE
from gnnpipe.training.model_inputs import read_model_inputs, read_roles
from gnnpipe.training.predict import (candidate_pairs, label_counts, load_model, model_outputs,
                             node_prediction_blocks, pair_score_blocks, read_classes_of,
                             read_node_ids_of, write_embeddings)
from gnnpipe.data.graph import edge_type_name, parse_edge_type



def run(args):
    """Reads the variant, re-launches under torchrun when train.dist.nproc * nnodes > 1 and
    runs the task on every rank; rank 0 writes."""
    params = load_params(args.params)
    task = split_task(args.split)
    with distributed.stage_ranks(args, params, "prediction") as ctx:
        if ctx is None:  # this process launched the ranks under torchrun; they are done
            return f"predicted on {params.train.dist.world_size} processes -> {args.out}"
        return RUNS[task](args, params, ctx)


def predict_nodes(args, params, ctx):
    pcfg = params.predict
    inputs = read_model_inputs(args, params.train, "node", phases=("test",))
    graph, target = inputs.graph, inputs.target
    classes, class_source = read_classes_of(args.prepared, graph.num_classes)
    roles = read_roles(args, inputs)
    if roles.size != graph.y.numel():
        raise ValueError(f"{args.split / 'nodes.parquet'}: {roles.size} roles for "
                         f"{graph.y.numel()} nodes; re-run the split stage")
    logits, hidden, how = _outputs(args, inputs, ctx, graph.num_classes, "target",
                                   {"num_classes": graph.num_classes}, pcfg.block_rows)
    if logits is None:  # another rank: rank 0 writes
        return None
    ids = read_node_ids_of(args.prepared, graph, target)
    hidden = {target: hidden} if target is None else hidden
    k = min(pcfg.top_k, graph.num_classes)
    with io.atomic_dir(args.out) as out:
        io.write_blocks(out / "predictions.parquet",
                        io.predictions_schema(ids[target].type, classes.type), io.PREDICTIONS,
                        node_prediction_blocks(logits.float(), graph.y, roles, ids[target],
                                               classes, k, pcfg.block_rows))
        for t, h in hidden.items():  # typed sage: a type without in-edges has none (to_hetero)
            write_embeddings(out, t, h.float(), ids[t], pcfg)
    counts = label_counts(graph.y)
    _write_metrics(args, ctx, target, hidden, {
        "task": "node", "rows": int(graph.y.numel()), **counts, "classes": graph.num_classes,
        "top_k": k, "embedding_dim": int(next(iter(hidden.values())).shape[1]),
        "embedding_dtype": pcfg.embedding_dtype, "inference": how, "message_graph": "test",
        "label_values": class_source,
        "roles": {r: int((roles == r).sum()) for r in ("train", "val", "test", "unused")}})
    return (f"{graph.y.numel()} nodes predicted ({counts['unlabelled']} unlabelled), "
            f"{_embeddings(hidden)} -> {args.out}")


def predict_links(args, params, ctx):
    pcfg, cfg = params.predict, params.train
    inputs = read_model_inputs(args, cfg, "link", phases=("test",))
    graph, target = inputs.graph, inputs.target
    edge_type = None if target is None else parse_edge_type(
        io.read_split_meta(args.split)["edge_type"])
    ids = read_node_ids_of(args.prepared, graph, target)
    offsets = {None: 0} if target is None else graph.offsets()  # rows of the decoder's z
    src, dst = (None, None) if edge_type is None else (edge_type[0], edge_type[2])
    pairs = candidate_pairs(params.predict.pairs, args.pairs_dir, ids[src], ids[dst])
    z, _, how = _outputs(args, inputs, ctx, cfg.hidden, "all", {"embedding_dim": cfg.hidden},
                         pcfg.block_rows)
    if z is None:  # another rank: rank 0 writes
        return None
    z = z.float()
    rows = {t: z[offsets[t]:offsets[t] + len(ids[t])] for t in ids}
    with io.atomic_dir(args.out) as out:
        for t, zt in rows.items():
            write_embeddings(out, t, zt, ids[t], pcfg)
        scored = 0 if pairs is None else io.write_blocks(
            out / "pair_scores.parquet", io.pair_scores_schema(pairs[0].type, pairs[1].type),
            io.PAIR_SCORES, pair_score_blocks(z, pairs[2] + offsets[src],
                                              pairs[3] + offsets[dst], pairs[0], pairs[1],
                                              pcfg.block_rows))
    held_out = {} if edge_type is None else {"edge_type": edge_type_name(edge_type)}
    _write_metrics(args, ctx, target, rows, {
        "task": "link", **held_out, "rows": int(z.shape[0]), "embedding_dim": int(z.shape[1]),
        "embedding_dtype": pcfg.embedding_dtype, "inference": how, "message_graph": "test",
        "pairs": scored})
    return (_embeddings(rows) + (f", {scored} pairs scored" if pairs is not None else "")
            + f" -> {args.out}")


def _embeddings(per_type: dict) -> str:
    """What the result line says of the embeddings (type -> (N_t, D)): their width, and the
    types when there are several."""
    width = int(next(iter(per_type.values())).shape[1])
    types = f" for {len(per_type)} node types" if len(per_type) > 1 else ""
    return f"embeddings of width {width}{types}"


def _outputs(args, inputs, ctx, out_dim: int, out: str, expect: dict, block_rows: int):
    """(output, hidden, how) of the trained model on the test phase's inputs; typed graphs run
    on rank 0 alone. (None, None, how) on the other ranks."""
    model = load_model(inputs.model(out_dim, out), io.read_model(args.model), inputs.meta(expect),
                       Path(args.model) / "model.pt")
    if inputs.target is not None and not ctx.is_main:
        return None, None, "full"
    return model_outputs(model, inputs.phases["test"], ctx if inputs.target is None else SINGLE,
                         block_rows)


def _write_metrics(args, ctx, target, hidden: dict, payload: dict) -> None:
    """predict.json; a typed graph's also gives each type's node type and embedding rows."""
    if target is None:
        io.write_json(args.metrics, {**payload, "world_size": ctx.world_size})
        return
    node_type = {"node_type": target} if payload["task"] == "node" else {}
    io.write_json(args.metrics, {**payload, **node_type, "embedding_rows": {
        t: int(h.shape[0]) for t, h in hidden.items()}})


RUNS = {"node": predict_nodes, "link": predict_links}
