"""``graph.json``: the description of every prepared graph, homogeneous or typed.

prepare writes it beside ``graph.pt`` for both kinds; readers check it before they trust the
tensors. It lists (schema ``gnnpipe.graph_description/1``):

* ``node_types``: ``[name, num_nodes, num_features]`` per node type, in order;
* ``edge_types``: ``src__relation__dst`` per edge type, in order (one CSR each in graph.pt);
* ``target`` (the labelled node type), ``num_classes``, ``reverse`` (edge type -> its reverse
  edge type), ``link_edge_type`` (what link prediction holds out by default);
* the optional tensors, only when present: ``node_time`` (node types with times),
  ``edge_time`` (edge types with times), ``public_roles`` (true: the official split),
  ``features`` (node types whose x is kept in features_<T>.npy, outside graph.pt),
  ``featureless`` (node types that had no feature columns in the user's tables: their x is
  prepare's ``dataset.typed.featureless`` default; ``train.embeddings.types: featureless``).

A homogeneous graph is described as ``Graph.homogeneous`` builds it: node type ``node``,
edge type ``node__to__node`` (its own reverse). Every graph's files follow one layout, named
from these types (gnnpipe/io/typed.py); ``layout`` (homogeneous | typed,
``gnnpipe.data.graph.layout_of``) is derived from them for the capability checks of the stages,
never stored as a flag.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gnnpipe.io.atomic import read_json, write_json
from gnnpipe.data.graph import Graph, check_name, edge_type_name, layout_of, parse_edge_type

__all__ = ["DESCRIPTION", "DESCRIPTION_SCHEMA", "write_description", "read_description",
           "read_featureless"]

DESCRIPTION = "graph.json"
DESCRIPTION_SCHEMA = "gnnpipe.graph_description/1"


def write_description(out: Path, graph: Graph, *, external: list[str] = (),
                      featureless: Iterable[str] = ()) -> None:
    """``graph.json`` of ``graph``; ``external``: the node types whose x is kept in
    features_<T>.npy; ``featureless``: the node types whose x prepare made (no feature
    columns), listed in node-type order whatever order they come in."""
    extras: dict = {}  # the optional tensors, listed only when present
    if graph.node_time:
        extras["node_time"] = list(graph.node_time)
    if graph.edge_time:
        extras["edge_time"] = [edge_type_name(e) for e in graph.edge_time]
    if graph.public_roles is not None:
        extras["public_roles"] = True
    if external:
        extras["features"] = list(external)
    featureless = set(featureless)
    if featureless:  # absent, not empty: a graph with features everywhere keeps its bytes
        extras["featureless"] = [t for t in graph.node_types if t in featureless]
    write_json(Path(out) / DESCRIPTION, {
        "schema": DESCRIPTION_SCHEMA,
        "node_types": [[t, n, int(graph.x[t].shape[1])] for t, n in graph.num_nodes_dict.items()],
        "edge_types": [edge_type_name(e) for e in graph.edge_types],
        "target": graph.target, "num_classes": graph.num_classes,
        "reverse": {edge_type_name(e): edge_type_name(r) for e, r in graph.reverse.items()},
        "link_edge_type": edge_type_name(graph.link_edge_type), **extras})


def read_description(prepared: Path) -> dict:
    """``graph.json``, checked: node types (name, size, width), edge types over them, target,
    reverse and link edge types, optional tensors. Adds ``sizes`` (type -> num_nodes),
    ``edge_type_list`` (parsed edge types) and ``layout`` (homogeneous | typed, derived)."""
    path = Path(prepared) / DESCRIPTION
    meta = read_json(path)
    if not isinstance(meta, dict) or meta.get("schema") != DESCRIPTION_SCHEMA:
        found = meta.get("schema") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"{path}: expected a {DESCRIPTION_SCHEMA!r} file, found {found!r}")
    types = {}
    for entry in meta.get("node_types", []):
        if (not isinstance(entry, list) or len(entry) != 3 or not all(
                isinstance(v, int) and v >= 0 for v in entry[1:])):
            raise ValueError(f"{path}: node_types entries must be [name, num_nodes, features]")
        types[check_name(entry[0], f"{path}: node type")] = entry[1]
    if not types or not meta.get("edge_types"):
        raise ValueError(f"{path}: node_types and edge_types must each list at least one type")
    edge_types = [parse_edge_type(name) for name in meta["edge_types"]]
    for s, rel, d in edge_types:
        check_name(rel, f"{path}: relation")
        if s not in types or d not in types:
            raise ValueError(f"{path}: edge type {s}__{rel}__{d} joins unknown node types")
    if meta.get("target") not in types:
        raise ValueError(f"{path}: target {meta.get('target')!r} is not a node type")
    if not isinstance(meta.get("num_classes"), int) or meta["num_classes"] < 1:
        raise ValueError(f"{path}: num_classes must be an int >= 1, found "
                         f"{meta.get('num_classes')!r}")
    names = set(meta["edge_types"])
    reverse = meta.get("reverse", {})
    if not isinstance(reverse, dict) or set(reverse) - names or set(reverse.values()) - names:
        raise ValueError(f"{path}: 'reverse' must map edge types to edge types")
    if meta.get("link_edge_type") not in names:
        raise ValueError(f"{path}: link_edge_type {meta.get('link_edge_type')!r} is not an edge type")
    for key, kind, known in (("node_time", "node", set(types)), ("edge_time", "edge", names),
                             ("features", "node", set(types)), ("featureless", "node", set(types))):
        listed = meta.get(key, [])
        if not isinstance(listed, list) or set(listed) - known:
            raise ValueError(f"{path}: {key!r} must list {kind} types")
    return {**meta, "sizes": types, "edge_type_list": edge_types,
            "layout": layout_of(list(types), edge_types)}


def read_featureless(prepared: Path) -> list[str]:
    """The node types of the prepared graph that had no feature columns (graph.json's
    ``featureless``, node-type order; [] when every type had features)."""
    return list(read_description(prepared).get("featureless", []))
