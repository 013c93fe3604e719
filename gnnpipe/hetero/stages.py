"""Stage glue of the heterogeneous path: ``gnnpipe/commands/<stage>.py`` calls ``<stage>(args,
params)`` here when ``data/prepared`` holds a heterogeneous graph (``gnnpipe.io.hetero``).

Each function reads the same arguments and writes the same outputs (paths and metric formats)
as its homogeneous stage, so ``dvc.yaml``, ``report`` and ``dvc metrics`` work unchanged:

  prepare    the built-in papers / authors / venues graph -> typed Parquet tables, graph.pt
  split      typed node split of the target type, or link split of one edge type + reverse;
             the audit per node type and edge type -> metrics/split_audit.json
  analyze    the homogeneous diagnostics of the target type over its own relation (paper
             cites paper: homophily, degrees, components, labels) plus ``hetero``: per-type counts
  partition  METIS (etc.) on the homogeneous projection of the train-phase graph (every node
             and edge type, ``to_homogeneous`` ids); meta.json lists the type offsets
  propagate  not applicable (SIGN hops are homogeneous): a meta.json marked
             ``applicable: false`` and no hop files; ``train.sampler: sign`` is refused
  baseline   the MLP on the target type's own features (node task), per-type MLP encoders
             (link task): the honest structure-free baseline
  train      ``train.model`` sage (to_hetero GraphSAGE) | hgt | rgcn | mlp on full-graph
             ``HeteroData``-style dicts per phase (or ``train.sampler: hgt`` mini-batches,
             ``gnnpipe.hetero.loader``), through ``gnnpipe.train.fit`` /
             ``gnnpipe.link_train.fit_link``
  evaluate   node: accuracy / macro-F1 on the target type, smoothing on its relation; link:
             ROC-AUC, AP, Hits@K, MRR on the fixed typed negatives
"""

from __future__ import annotations

import resource
import time

import numpy as np
import torch

from gnnpipe import audit, io
from gnnpipe.config import to_dict
from gnnpipe.graph import Csr
from gnnpipe.hetero.graph import EdgeType, HeteroGraph, edge_type_name, homogeneous_csr
from gnnpipe.io import hetero as hio
from gnnpipe.progress import progress
from gnnpipe.rng import make_rng, torch_seed
from gnnpipe.train import PhaseInput, build_inputs

PHASES = ("train", "val", "test")
SAMPLERS = ("full", "hgt")  # hgt: per-type node budgets (node task); link: full only


# ------------------------------------------------------------------------------------ prepare
def prepare(args, params) -> str:
    from gnnpipe.hetero.synthetic import generate_hetero

    cfg = params.dataset  # Params checked dataset.source=synthetic (config._check_typed_source)
    graph, counts = generate_hetero(cfg, make_rng(params.seed, "prepare"))
    with io.atomic_dir(args.out) as out:
        hio.write_hetero_prepared(out, graph)
    target = graph.target
    degrees = graph.csr[graph.self_relation()].degrees()
    report = {
        "source": "synthetic", "hetero": True, "target": target,
        "nodes": graph.total_nodes, "edges": sum(c.num_edges for c in graph.csr.values()),
        "features": int(graph.x[target].shape[1]), "classes": graph.num_classes,
        "undirected": True,  # cites is stored both ways, other relations with their reverse
        "duplicates_removed": counts["cites_duplicates_removed"]
        + counts["writes_duplicates_removed"],
        "self_loops_removed": counts["cites_self_loops_removed"],
        "isolated_nodes": int((degrees == 0).sum()),  # of the target type, over its relation
        "node_types": {t: graph.num_nodes(t) for t in graph.node_types},
        "edge_types": {edge_type_name(e): c.num_edges for e, c in graph.csr.items()},
        **counts}
    io.write_json(args.metrics, report)
    types = ", ".join(f"{n} {t}" for t, n in report["node_types"].items())
    return (f"heterogeneous graph: {types}; {report['edges']} edges in {len(graph.csr)} types "
            f"-> {args.out}")


# -------------------------------------------------------------------------------------- split
def split(args, params) -> str:
    from gnnpipe.hetero.audit import audit_hetero_link_split, audit_hetero_node_split
    from gnnpipe.hetero.split import split_hetero_links, split_hetero_nodes

    graph = hio.read_hetero_graph(args.prepared)
    rng = make_rng(params.seed, "split")
    if params.dataset.task == "link":
        cfg = params.split.link
        link = split_hetero_links(graph, cfg, rng)
        disjoint = cfg.disjoint_train_ratio > 0
        report = audit_hetero_link_split(graph, link.edge_type, link.edges, link.negatives,
                                         link.message_graphs, disjoint=disjoint)
        report["negative_strategy"] = cfg.negative_strategy
        io.write_json(args.audit, report)
        audit.raise_if_failed(report)
        with io.atomic_dir(args.out) as out:
            hio.write_hetero_split(out, graph, link.message_graphs, {
                "task": "link", "edge_type": edge_type_name(link.edge_type),
                "reverse_edge_type": report["reverse_edge_type"],
                "disjoint_train_ratio": cfg.disjoint_train_ratio,
                "negative_strategy": cfg.negative_strategy},
                edges=link.edges, negatives=link.negatives)
        return (f"{report['edge_type']} (+ reverse {report['reverse_edge_type']}) pairs "
                f"{report['sizes']}, audit passed -> {args.out}")
    node_split = split_hetero_nodes(graph, params.split.node, rng)
    report = audit_hetero_node_split(graph, node_split.roles, node_split.message_graphs,
                                     node_split.mode)
    io.write_json(args.audit, report)
    audit.raise_if_failed(report)
    with io.atomic_dir(args.out) as out:
        hio.write_hetero_split(out, graph, node_split.message_graphs,
                               {"task": "node", "mode": node_split.mode}, roles=node_split.roles)
    return (f"{graph.target} nodes {report['sizes']} ({node_split.mode}), audit passed per "
            f"edge type -> {args.out}")


def _split_inputs(args) -> tuple[HeteroGraph, dict, dict[str, dict[EdgeType, Csr]]]:
    graph = hio.read_hetero_graph(args.prepared)
    meta = hio.read_hetero_split_meta(args.split)
    return graph, meta, hio.read_hetero_message_graphs(args.split, graph)[1]


# ------------------------------------------------------------------------------------ analyze
def analyze(args, params) -> str:
    from gnnpipe.analyze import analyze_graph
    from gnnpipe.hetero.graph import type_summary

    graph, meta, graphs = _split_inputs(args)
    own = graph.self_relation()
    if meta["task"] == "node":
        roles = hio.read_hetero_roles(args.split, graph)
        report, histogram = analyze_graph(graph.target_graph(), params.analyze,
                                          {p: graphs[p][own] for p in PHASES}, roles)
    else:
        report, histogram = analyze_graph(graph.target_graph(), params.analyze)
    report["analyzed_relation"] = edge_type_name(own)
    report["hetero"] = type_summary(graph)
    io.write_json(args.metrics, report)
    io.write_csv(args.degree_hist, histogram)
    h = report["homophily"]
    summary = (f"{edge_type_name(own)}: edge homophily {h['edge']}, adjusted {h['adjusted']}, "
               f"{report['components']['count']} components -> {args.metrics}")
    return "; ".join([summary, *(f"WARNING: {w}" for w in report["warnings"])])


# ---------------------------------------------------------------------------------- partition
def projected_train_graph(split) -> tuple[Csr, dict]:
    """The train phase's graph of every edge type as one homogeneous CSR (``to_homogeneous``
    ids) and what ``data/partition/meta.json`` adds to say so."""
    sizes, graphs = hio.read_hetero_message_graphs(split)
    starts = np.cumsum([0] + [n for _, n in sizes]).tolist()
    meta = {"hetero": True, "projection": "to_homogeneous",
            "node_types": [[t, starts[i], n] for i, (t, n) in enumerate(sizes)]}
    return homogeneous_csr(sizes, graphs["train"]), meta


# ---------------------------------------------------------------------------------- propagate
NOT_APPLICABLE = ("SIGN hops A^k X need one feature space and one adjacency; a heterogeneous "
                  "graph has one per node type and edge type, so the propagate stage does not "
                  "apply (train.sampler=sign is refused)")


def propagate(args, params) -> str:
    io.read_json(args.split / "meta.json")  # the upstream artifact must exist all the same
    with io.atomic_dir(args.out) as out:
        io.write_propagate_meta(out, {"applicable": False, "hetero": True,
                                      "reason": NOT_APPLICABLE})
    io.write_json(args.perf, {"applicable": False, "seconds": 0.0, "hop_seconds": []})
    return f"not applicable to a heterogeneous graph; marked {args.out / 'meta.json'}"


# ------------------------------------------------------------------------- training, shared
def phase_inputs(graph: HeteroGraph, graphs: dict[str, dict[EdgeType, Csr]]
                 ) -> dict[str, PhaseInput]:
    """Phase -> ``PhaseInput(x_dict, edge_index_dict)``: the whole graph's features and the
    phase's own typed edges (phases sharing a message graph share the tensors)."""
    built: dict[int, dict] = {}
    out = {}
    for phase in PHASES:
        key = id(graphs[phase])
        if key not in built:
            built[key] = {e: csr.edge_index() for e, csr in graphs[phase].items()}
        out[phase] = PhaseInput(graph.x, built[key])  # type: ignore[arg-type]
    return out


def _link_setup(args, graph: HeteroGraph, graphs):
    """Held-out edge type, positives and negatives in homogeneous ids, training sampler."""
    from gnnpipe.hetero.split import negative_weights, typed_negative_sampler

    edge_type, edges, negatives = hio.read_hetero_link_split(args.split, graph)
    offsets = graph.offsets()
    s_off, d_off = offsets[edge_type[0]], offsets[edge_type[2]]
    shifted = {role: torch.stack([pair[0] + s_off, pair[1] + d_off]) for role, pair in edges.items()}
    shifted_negatives = {phase: targets + d_off for phase, targets in negatives.items()}
    # training negatives avoid only what training may see (gnnpipe/negatives.py), typed
    visible = torch.cat([edges["message"], edges["train_supervision"]], dim=1).numpy()
    strategy = hio.read_hetero_split_meta(args.split).get("negative_strategy", "uniform")
    weights = negative_weights(graph, edge_type, strategy, graphs["train"][edge_type])
    sampler = typed_negative_sampler(graph, edge_type, visible[0], visible[1], weights)
    return edge_type, shifted, shifted_negatives, sampler


def _perf_rows(result) -> list[dict]:
    rows = getattr(result, "perf_history", None)
    if rows:
        return rows
    return [{"epoch": result.summary["epochs_run"], "train_seconds": result.perf["seconds"],
             "eval_seconds": "", "batches": "", "seeds": "",
             "seeds_per_s": result.perf.get("train_edges_per_s", ""), "batches_per_s": ""}]


# ----------------------------------------------------------------------------------- baseline
def baseline(args, params) -> str:
    from gnnpipe.models import build_model
    from gnnpipe.train import fit

    cfg = params.baseline
    graph, meta, graphs = _split_inputs(args)
    seed = torch_seed(params.seed, "baseline")
    if meta["task"] == "link":
        from gnnpipe.hetero.models import build_hetero_model
        from gnnpipe.link_train import fit_link

        _, edges, negatives, sampler = _link_setup(args, graph, graphs)
        dims = {t: int(x.shape[1]) for t, x in graph.x.items()}
        result = fit_link(lambda: build_hetero_model("mlp", graph.metadata(), dims, cfg.hidden,
                                                     graph.target, cfg, out="all"),
                          phase_inputs(graph, graphs), edges, negatives, sampler, cfg, seed,
                          progress=progress)
        with io.atomic_dir(args.out) as out:
            io.write_link_predictions(out, result.scores)
        io.write_json(args.metrics, {"model": "mlp", "hetero": True, **result.summary})
        message = f"mlp per-type link encoders, best val MRR {result.summary['best_val_mrr']:.4f}"
    else:
        roles = hio.read_hetero_roles(args.split, graph)
        x = graph.x[graph.target]  # the target type's own features: nothing from the graph
        result = fit(lambda: build_model("mlp", x.shape[1], graph.num_classes, cfg),
                     build_inputs(x), graph.y, roles, cfg, seed, progress=progress)
        with io.atomic_dir(args.out) as out:
            io.write_predictions(out, result.node_id, result.logits)
        io.write_json(args.metrics, {"model": "mlp", "hetero": True, "node_type": graph.target,
                                     **result.summary})
        message = f"mlp on {graph.target} features, best val acc {result.summary['best_val_acc']:.4f}"
    io.write_json(args.perf, result.perf)
    io.write_csv(args.history, result.history)
    return f"{message} -> {args.out}"


# -------------------------------------------------------------------------------------- train
def train(args, params) -> str:
    from gnnpipe.hetero.models import build_hetero_model
    from gnnpipe.train import Checkpointing, fit

    cfg = params.train
    # Params checked model, sampler, processes, amp/compile/residual (config._check_typed_train)
    graph, meta, graphs = _split_inputs(args)
    inputs = phase_inputs(graph, graphs)
    dims = {t: int(x.shape[1]) for t, x in graph.x.items()}
    seed = torch_seed(params.seed, "train")
    model_meta = {"model": cfg.model, "hetero": 1, "target": graph.target,
                  "node_types": ",".join(graph.node_types),
                  "edge_types": ",".join(edge_type_name(e) for e in graph.edge_types)}
    started = time.perf_counter()
    if meta["task"] == "link":
        from gnnpipe.link_train import fit_link

        edge_type, edges, negatives, sampler = _link_setup(args, graph, graphs)
        result = fit_link(lambda: build_hetero_model(cfg.model, graph.metadata(), dims,
                                                     cfg.hidden, graph.target, cfg, out="all"),
                          inputs, edges, negatives, sampler, cfg, seed, progress=progress)
        with io.atomic_dir(args.out) as out:
            io.write_link_predictions(out, result.scores)
            io.save_model(out, result.state_dict, {**model_meta, "task": "link",
                                                   "embedding_dim": cfg.hidden})
        io.write_json(args.metrics, {"model": cfg.model, "sampler": cfg.sampler, "hetero": True,
                                     "edge_type": edge_type_name(edge_type), **result.summary})
        message = (f"{cfg.model} on {edge_type_name(edge_type)}, best val MRR "
                   f"{result.summary['best_val_mrr']:.4f}")
    else:
        roles = hio.read_hetero_roles(args.split, graph)
        fingerprint = io.input_fingerprint(to_dict(cfg), params.seed, [args.prepared, args.split])
        resume_from = io.read_checkpoint(args.checkpoint, fingerprint) if cfg.checkpoint.resume else None
        checkpointing = Checkpointing(
            every=cfg.checkpoint.every, resume_from=resume_from,
            save=lambda payload: io.write_checkpoint(args.checkpoint, payload, fingerprint))
        loader, extra = None, {}
        if cfg.sampler == "hgt":  # seeds: train papers; nodes of every type from the train graph
            from gnnpipe.hetero.loader import hgt_batches

            loader = hgt_batches(graph, graphs["train"], np.flatnonzero(roles == "train"),
                                 cfg.hgt.num_samples, cfg.batch_size,
                                 torch_seed(params.seed, "sample"), cfg.num_workers)
            extra = {"batches_per_epoch": len(loader), "num_samples": list(cfg.hgt.num_samples)}
        result = fit(lambda: build_hetero_model(cfg.model, graph.metadata(), dims,
                                                graph.num_classes, graph.target, cfg),
                     inputs, graph.y, roles, cfg, seed, loader=loader, progress=progress,
                     checkpointing=checkpointing)
        with io.atomic_dir(args.out) as out:
            io.write_predictions(out, result.node_id, result.logits)
            io.save_model(out, result.state_dict, {**model_meta, "num_classes": graph.num_classes})
        io.write_json(args.metrics, {"model": cfg.model, "sampler": cfg.sampler, "hetero": True,
                                     "node_type": graph.target, **result.summary, **extra})
        message = f"{cfg.model} on {graph.target}, best val acc {result.summary['best_val_acc']:.4f}"
    # ru_maxrss is KiB on Linux: the process's high-water mark, its inputs included
    peak_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    io.write_json(args.perf, {**result.perf, "hetero": True, "ranks": [
        {"rank": 0, "peak_rss_mb": peak_mb}],
        "stage_seconds": round(time.perf_counter() - started, 3)})
    io.write_csv(args.history, result.history)
    io.write_csv(args.perf_history, _perf_rows(result))
    args.checkpoint.unlink(missing_ok=True)
    return f"{message} -> {args.out}"


# ----------------------------------------------------------------------------------- evaluate
def evaluate(args, params) -> str:
    graph, meta, graphs = _split_inputs(args)
    if meta["task"] == "link":
        from gnnpipe.link_evaluate import compare_links, confusion_rows, score_link_predictions

        _, _, negatives = hio.read_hetero_link_split(args.split, graph)
        ks = params.evaluate.hits_k
        gnn_scores = io.read_link_predictions(args.model)
        gnn = score_link_predictions(gnn_scores, negatives, ks, str(args.model))
        mlp = score_link_predictions(io.read_link_predictions(args.baseline), negatives, ks,
                                     str(args.baseline))
        summary = compare_links(gnn, mlp, params.train.model, params.evaluate)
        summary["edge_type"] = meta["edge_type"]
        io.write_json(args.metrics, summary)
        io.write_json(args.details, {"gnn": gnn, "mlp": mlp})
        io.write_csv(args.confusion, confusion_rows(*gnn_scores["test"]))
        return summary["verdict"]
    from gnnpipe.evaluate import compare, confusion_rows, score_predictions, smoothing

    roles = hio.read_hetero_roles(args.split, graph)
    y = graph.y.numpy()
    gnn_pred, mlp_pred = io.read_predictions(args.model), io.read_predictions(args.baseline)
    gnn = score_predictions(*gnn_pred, y, roles, graph.num_classes)
    mlp = score_predictions(*mlp_pred, y, roles, graph.num_classes)
    summary = compare(gnn, mlp, params.train.model, params.evaluate)
    own = graph.self_relation()  # the target type's own relation in the test phase's graph
    summary["smoothing"] = {"gnn": smoothing(*gnn_pred, graphs["test"][own]),
                            "mlp": smoothing(*mlp_pred, graphs["test"][own]),
                            "relation": edge_type_name(own)}
    summary["node_type"] = graph.target
    io.write_json(args.metrics, summary)
    io.write_json(args.details, {"gnn": gnn, "mlp": mlp})
    io.write_csv(args.confusion, confusion_rows(*gnn_pred, y, roles, "test"))
    return summary["verdict"]
