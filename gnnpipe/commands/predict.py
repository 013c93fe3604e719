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

New data: `gnnpipe predict --model data/model/model.pt --graph DIR --out FILE.parquet` scores
the nodes of another graph with a trained model file alone (no params.yaml, no data/): DIR holds
the user's tables in the layout prepare reads (nodes.parquet + edges.parquet, or typed nodes/
and edges/ folders; the format and columns the model was trained with), new ids and edges
welcome. The model's saved feature transform and edge policies apply; the label column is
optional. FILE gets the columns of predictions.parquet under the user's ids (role: unused).
Refused in one line: a link-task or sign model, or a graph whose features, types or label
classes differ from the model's. See docs/sharing.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnpipe import io
from gnnpipe.commands.variant import split_task
from gnnpipe.config import load_params
from gnnpipe.pipeline import PREDICT
from gnnpipe.data.graph import ROLES, TYPED, edge_type_name, parse_edge_type
from gnnpipe.io.predictions import DEFAULT_TOP_K
from gnnpipe.training import distributed


STAGE_OUT = Path(PREDICT)  # the stage's own --out default


def add_arguments(parser) -> None:
    parser.add_argument("--graph", type=Path, default=None, metavar="DIR",
                        help="score a new graph: the folder of its node and edge tables, with "
                             "--model PATH (model.pt or its folder) and --out FILE.parquet; "
                             "params.yaml and data/ are not read")
    parser.add_argument("--top-k", type=int, default=DEFAULT_TOP_K, metavar="K",
                        help="with --graph: class probabilities kept per node")


def run(args):
    """Reads the variant, re-launches under torchrun when train.dist.nproc * nnodes > 1 and
    runs the task on every rank; rank 0 writes. With ``--graph``: a new graph scored by the
    model file alone (gnnpipe/training/new_graph.py)."""
    if args.graph is not None:
        return predict_new_graph(args)
    params = load_params(args.params)
    task = split_task(args.split)
    with distributed.stage_ranks(args, params, "prediction") as ctx:
        if ctx is None:  # this process launched the ranks under torchrun; they are done
            return f"predicted on {params.train.dist.world_size} processes -> {args.out}"
        return RUNS[task](args, params, ctx)


def predict_nodes(args, params, ctx):
    # the model code (PyG) is imported by the runs, so `gnnpipe predict --help` starts fast
    from gnnpipe.training.model_inputs import read_model_inputs
    from gnnpipe.training.predict import (embeddings_line, label_counts, node_prediction_blocks,
                                          prediction_metrics, read_classes_of, read_node_ids_of,
                                          trained_outputs, write_embeddings)

    pcfg = params.predict
    inputs = read_model_inputs(args, params.train, "node", phases=("test",))
    graph, target = inputs.graph, inputs.graph.target
    classes, class_source = read_classes_of(args.prepared, graph.num_classes)
    roles = io.read_typed_role_codes(args.split, graph)  # int8 (N,)
    logits, hidden, how = trained_outputs(inputs, args.model, ctx, graph.num_classes, "target",
                                          {"num_classes": graph.num_classes}, pcfg.block_rows)
    if logits is None:  # another rank: rank 0 writes
        return None
    ids = read_node_ids_of(args.prepared, graph)
    hidden = hidden if graph.layout == TYPED else {target: hidden}  # typed models give a dict
    k = min(pcfg.top_k, graph.num_classes)
    with io.atomic_dir(args.out) as out:
        io.write_blocks(out / "predictions.parquet",
                        io.predictions_schema(ids[target].type, classes.type), io.PREDICTIONS,
                        node_prediction_blocks(logits.float(), graph.y, roles, ids[target],
                                               classes, k, pcfg.block_rows))
        for t, h in hidden.items():  # typed sage: a type without in-edges has none (to_hetero)
            write_embeddings(out, graph, t, h.float(), ids[t], pcfg)
    counts = label_counts(graph.y)
    # nodes per role code, one (N,) bool at a time (bincount would cast roles to int64)
    per_role = np.array([np.count_nonzero(roles == code) for code in range(len(ROLES))])
    io.write_json(args.metrics, prediction_metrics(graph, ctx, hidden, {
        "task": "node", "rows": int(graph.y.numel()), **counts, "classes": graph.num_classes,
        "top_k": k, "embedding_dim": int(next(iter(hidden.values())).shape[1]),
        "embedding_dtype": pcfg.embedding_dtype, "inference": how, "message_graph": "test",
        "label_values": class_source,
        "roles": dict(zip(ROLES, per_role.tolist()))}))
    return (f"{graph.y.numel()} nodes predicted ({counts['unlabelled']} unlabelled), "
            f"{embeddings_line(hidden)} -> {args.out}")


def predict_links(args, params, ctx):
    from gnnpipe.reporting.collapse import collapse_warning
    from gnnpipe.training.model_inputs import read_model_inputs
    from gnnpipe.training.predict import (candidate_pairs, embeddings_line, held_out_collapse,
                                          pair_score_blocks, prediction_metrics,
                                          read_node_ids_of, trained_outputs, write_embeddings)

    pcfg, cfg = params.predict, params.train
    inputs = read_model_inputs(args, cfg, "link", phases=("test",))
    graph = inputs.graph
    edge_type = parse_edge_type(io.read_split_meta(args.split)["edge_type"])
    # candidate pairs are looked up among every id; else the ids are read as they are written
    ids = read_node_ids_of(args.prepared, graph, whole=bool(pcfg.pairs))
    offsets = graph.offsets()  # rows of the decoder's z
    src, dst = edge_type[0], edge_type[2]
    pairs = candidate_pairs(params.predict.pairs, args.pairs_dir, ids[src], ids[dst])
    z, _, how = trained_outputs(inputs, args.model, ctx, cfg.hidden, "all",
                                {"embedding_dim": cfg.hidden}, pcfg.block_rows)
    if z is None:  # another rank: rank 0 writes
        return None
    z = z.float()
    rows = {t: z[offsets[t]:offsets[t] + len(ids[t])] for t in ids}
    with io.atomic_dir(args.out) as out:
        for t, zt in rows.items():
            write_embeddings(out, graph, t, zt, ids[t], pcfg)
        scored = 0 if pairs is None else io.write_blocks(
            out / "pair_scores.parquet", io.pair_scores_schema(pairs[0].type, pairs[1].type),
            io.PAIR_SCORES, pair_score_blocks(z, pairs[2] + offsets[src],
                                              pairs[3] + offsets[dst], pairs[0], pairs[1],
                                              pcfg.block_rows))
    held_out = {"edge_type": edge_type_name(edge_type)} if graph.layout == TYPED else {}
    collapsed = held_out_collapse(z, args.split, graph)  # the written embeddings' test scores
    io.write_json(args.metrics, prediction_metrics(graph, ctx, rows, {
        "task": "link", **held_out, "rows": int(z.shape[0]), "embedding_dim": int(z.shape[1]),
        "embedding_dtype": pcfg.embedding_dtype, "inference": how, "message_graph": "test",
        "pairs": scored, "collapse": collapsed}))
    warning = collapse_warning({"test": collapsed}, f"the {cfg.model} encoder")
    return (embeddings_line(rows) + (f", {scored} pairs scored" if pairs is not None else "")
            + f" -> {args.out}" + (f"; WARNING: {warning}" if warning else ""))


def predict_new_graph(args) -> str:
    from gnnpipe.training.new_graph import predict_to_file

    if args.out == STAGE_OUT:
        raise ValueError("--graph needs --out FILE.parquet: where the new graph's predictions go "
                         f"({STAGE_OUT} is the predict stage's folder)")
    if args.top_k < 1:
        raise ValueError(f"--top-k={args.top_k}: expected >= 1")
    done = predict_to_file(args.model, args.graph, args.out, top_k=args.top_k)
    return (f"{done['rows']} nodes of {args.graph} predicted ({done['labelled']} labelled, "
            f"{done['classes']} classes, {done['how']} forward) -> {args.out}")


RUNS = {"node": predict_nodes, "link": predict_links}
