"""Hashes of the VALUES of every prepared graph and split, read through the public readers.

``compare_artifacts.py`` hashes files; a change of the files' layout (names, schema tags, keys)
changes those hashes while the values stay. This script runs the prepare and split stages of
the same pipelines (``compare_artifacts.run_pipeline``), reads each folder back through the
public readers of ``gnnpipe.io`` and hashes every tensor and table column under a name that
does not depend on the layout:

    PYTHONPATH=<old tree> python bench/compare_layouts.py --out /tmp/values.json
    python bench/compare_layouts.py --compare /tmp/values.json

The reading runs in a child process with the caller's ``PYTHONPATH`` (the tree being measured).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the whole-table readers
from compare_artifacts import PIPELINES, run_pipeline, save_and_compare  # noqa: E402


def _digest(array) -> str:
    """dtype, shape and bytes of a numpy array or torch tensor (bfloat16 by its bits)."""
    import numpy as np
    import torch

    if isinstance(array, torch.Tensor):
        array = array.contiguous()
        dtype = str(array.dtype)
        array = (array.view(torch.int16) if array.dtype == torch.bfloat16 else array).numpy()
    else:
        array = np.ascontiguousarray(array)
        dtype = str(array.dtype)
    h = hashlib.sha256(f"{dtype}{array.shape}".encode())
    h.update(array.tobytes())
    return h.hexdigest()[:16]


def _columns(prefix: str, table, out: dict) -> None:
    for name in table.column_names:
        out[f"{prefix}.{name}"] = hashlib.sha256(json.dumps(
            [str(table.schema.field(name).type), table.column(name).to_pylist()],
            default=str).encode()).hexdigest()[:16]


def read_values(root: Path) -> dict[str, str]:
    """Layout-free names -> hashes of the prepared graph and split under ``root``."""
    import numpy as np

    from gnnpipe import io
    from prepared_oracle import read_typed_edge_table, read_typed_node_table
    from gnnpipe.data.graph import ROLE_CODES, ROLES, edge_type_name

    prepared, split = root / "data/prepared", root / "data/split"
    out: dict[str, str] = {}
    graph = io.read_graph(prepared)
    stored = io.read_graph(prepared, stored_x=True)
    out["graph.meta"] = json.dumps([graph.target, graph.num_classes,
                                    [[edge_type_name(e), edge_type_name(r)]
                                     for e, r in graph.reverse.items()],
                                    edge_type_name(graph.link_edge_type), graph.sizes()])
    for t in graph.node_types:
        out[f"graph.x.{t}"] = _digest(graph.x[t])
        out[f"graph.stored_x.{t}"] = _digest(stored.x[t])
    out["graph.y"] = _digest(graph.y)
    for e, csr in graph.csr.items():
        out[f"graph.csr.{edge_type_name(e)}"] = _digest(csr.indptr) + _digest(csr.indices)
    for t, v in graph.node_time.items():
        out[f"graph.node_time.{t}"] = _digest(v)
    for e, v in graph.edge_time.items():
        out[f"graph.edge_time.{edge_type_name(e)}"] = _digest(v)
    if graph.public_roles is not None:
        out["graph.public_roles"] = _digest(graph.public_roles)
    for t in graph.node_types:
        _columns(f"nodes.{t}", read_typed_node_table(prepared, t), out)
        try:
            _columns(f"node_ids.{t}", io.read_typed_node_ids(prepared, t), out)
        except ValueError as err:
            if "file not found" not in str(err):
                raise
    for e in graph.edge_types:
        _columns(f"edges.{edge_type_name(e)}", read_typed_edge_table(prepared, e), out)
    try:
        # main before the one layout read it without an edge type
        one_type = io.read_edge_attrs.__code__.co_argcount == 1
        _columns("edge_attrs", io.read_edge_attrs(prepared) if one_type else
                 io.read_edge_attrs(prepared, graph.link_edge_type), out)
    except ValueError as err:
        if "file not found" not in str(err):
            raise
    _columns("classes", __import__("pyarrow").table({"label": io.read_classes(prepared)}), out)

    meta = io.read_split_meta(split)
    out["split.meta"] = json.dumps({k: meta[k] for k in sorted(meta) if k not in (
        "message_graph", "sizes", "edge_type_list", "layout")}, sort_keys=True)
    _, phases = io.read_typed_message_graphs(split, graph)
    owner = {}
    for phase, graphs in phases.items():
        out[f"split.shares.{phase}"] = owner.setdefault(id(graphs), phase)
        for e, csr in graphs.items():
            out[f"split.message.{phase}.{edge_type_name(e)}"] = (_digest(csr.indptr)
                                                                 + _digest(csr.indices))
    if meta.get("task") == "link":
        edge_type, edges, negatives = io.read_typed_link_split(split, graph)
        out["split.link_edge_type"] = edge_type_name(edge_type)
        for role, pairs in edges.items():
            out[f"split.edges.{role}"] = _digest(pairs)
        for phase, targets in negatives.items():
            out[f"split.negatives.{phase}"] = _digest(targets)
        hard = io.read_link_negatives(split, edges, graph.num_nodes_dict[edge_type[2]], hard=True)
        for phase, targets in (hard or {}).items():
            out[f"split.hard_negatives.{phase}"] = _digest(targets)
    try:
        roles = io.read_typed_role_codes(split, graph)
    except ValueError as err:
        # a typed link split kept no roles file before the one layout: no node carried a
        # label role, i.e. every target node unused (what the one layout writes for a link split)
        if "file not found" not in str(err) or meta.get("task") != "link":
            raise
        roles = np.full(graph.num_nodes_dict[graph.target], ROLE_CODES["unused"], np.int8)
    # hashed as names, as trees before the int8 role codes hashed them: values comparable across
    out["split.roles"] = _digest(np.asarray(ROLES, dtype="U8")[roles])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", default=",".join(PIPELINES),
                        help=f"comma-separated subset of {', '.join(PIPELINES)}")
    parser.add_argument("--out", type=Path, help="write the hashes here (JSON)")
    parser.add_argument("--compare", type=Path, help="compare with hashes written by --out")
    parser.add_argument("--read", type=Path, help=argparse.SUPPRESS)  # the child: one folder
    args = parser.parse_args(argv)
    if args.read is not None:
        print(json.dumps(read_values(args.read)))
        return 0
    os.environ.setdefault("GNNPIPE_PROGRESS", "0")
    result = {}
    with tempfile.TemporaryDirectory(prefix="gnnpipe-layouts-") as keep:
        for name in (n for n in args.pipelines.split(",") if n):
            run_pipeline(name, True, ("prepare", "split"), Path(keep))
            child = subprocess.run([sys.executable, __file__, "--read", str(Path(keep) / name)],
                                   check=True, stdout=subprocess.PIPE, text=True)
            result[name] = json.loads(child.stdout)
    return save_and_compare(result, args.out, args.compare, "values")


if __name__ == "__main__":
    sys.exit(main())
