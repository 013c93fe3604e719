"""``dataset.source: ogb`` on the binary layout of ogbn-papers100M (raw/data.npz, node-label.npz).

Each test writes its own small folder with ``np.savez`` / ``np.savez_compressed``. The graph has
``x[:, 0] == node id``, sparse class values 3 / 7 / 11 with NaN for unlabelled nodes and edges
in shuffled order, so a misplaced block, a lost edge or a wrong label map is a plain inequality.
"""

from __future__ import annotations

import gzip
import json
import zipfile
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.config import params_from_dict
from gnnpipe.data.graph import EDGE, NODE, ROLES, UNLABELLED
from gnnpipe.sources import ogb

N, F = 50, 4
CLASSES = [3, 7, 11]
SPLIT = {"train": np.arange(0, 25), "val": np.arange(25, 35), "test": np.arange(35, 45)}


def reference() -> dict:
    rng = np.random.default_rng(3)
    x = np.concatenate([np.arange(N)[:, None], rng.standard_normal((N, F - 1)).round(2)],
                       axis=1).astype(np.float32)
    label = np.asarray(CLASSES, dtype=np.float64)[np.arange(N) % 3]
    label[np.arange(N) % 4 == 1] = np.nan  # a quarter unlabelled, as papers100M's NaN
    ring = np.arange(N)
    src = np.concatenate([ring, ring[::5]])
    dst = np.concatenate([(ring + 1) % N, (ring[::5] + 17) % N])
    order = rng.permutation(src.size)  # no duplicates, no self-loops: prepare keeps them all
    codes = np.full(N, UNLABELLED, dtype=np.int64)
    known = ~np.isnan(label)
    codes[known] = np.searchsorted(CLASSES, label[known])
    return {"x": x, "label": label[:, None], "codes": codes,
            "edge_index": np.stack([src[order], dst[order]]).astype(np.int64)}


def _gz_ids(path: Path, ids: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as handle:
        handle.writelines(f"{i}\n" for i in ids)


def write_binary(root: Path, compressed: bool = True, graph: dict | None = None,
                 labels: dict | None = None) -> dict:
    """The folder ``root`` (raw/ + split/time/); ``graph`` / ``labels`` replace (None: drop)
    arrays of data.npz / node-label.npz."""
    ref = reference()
    arrays = {"edge_index": ref["edge_index"], "node_feat": ref["x"],
              "num_nodes_list": np.array([N], dtype=np.int64),
              "num_edges_list": np.array([ref["edge_index"].shape[1]], dtype=np.int64),
              "node_year": np.full((N, 1), 2020, dtype=np.int64)}  # an extra array: ignored
    label_arrays = {"node_label": ref["label"]}
    for target, changes in ((arrays, graph), (label_arrays, labels)):
        for key, value in (changes or {}).items():
            if value is None:
                target.pop(key)
            else:
                target[key] = value
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    save = np.savez_compressed if compressed else np.savez
    save(raw / "data.npz", **arrays)
    save(raw / "node-label.npz", **label_arrays)
    for role, name in (("train", "train"), ("val", "valid"), ("test", "test")):
        _gz_ids(root / "split" / "time" / f"{name}.csv.gz", SPLIT[role])
    return ref


def cfg_for(root: Path, **extra):
    return params_from_dict({"dataset": {"source": "ogb", "path": str(root), **extra}}).dataset


def assert_roles(roles: np.ndarray) -> None:
    names = np.asarray(ROLES)[roles]
    for role, ids in SPLIT.items():
        assert np.array_equal(np.flatnonzero(names == role), ids)
    assert int((names == "unused").sum()) == N - 45


@pytest.mark.parametrize("compressed", [True, False], ids=["deflated", "stored"])
@pytest.mark.parametrize("block_rows", [None, 7], ids=["one-block", "7-row-blocks"])
def test_binary_layout_reads_back_the_arrays(tmp_path, monkeypatch, compressed, block_rows):
    if block_rows is not None:  # 7 does not divide N: the last block is short
        monkeypatch.setattr(ogb, "NPZ_BLOCK_ROWS", block_rows)
    ref = write_binary(tmp_path / "ogbn_papers100M", compressed)
    raw = ogb.read(cfg_for(tmp_path, name="ogbn-papers100M"))
    assert raw.nodes[NODE].x.dtype == np.float32 and np.array_equal(raw.nodes[NODE].x, ref["x"])
    assert raw.relations[EDGE].src.dtype == np.int64 and np.array_equal(raw.relations[EDGE].src, ref["edge_index"][0])
    assert np.array_equal(raw.relations[EDGE].dst, ref["edge_index"][1])
    assert np.array_equal(raw.y, ref["codes"]) and int((raw.y == UNLABELLED).sum()) == 13
    assert raw.class_values.to_pylist() == CLASSES
    assert_roles(raw.public_roles)


def test_node_feat_is_streamed_in_blocks_not_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(ogb, "NPZ_BLOCK_ROWS", 8)
    x16 = reference()["x"].astype(np.float16)
    write_binary(tmp_path, compressed=True, graph={"node_feat": x16})
    reads: dict[str, list[int]] = {}
    original = zipfile.ZipExtFile.read

    def spy(self, n=-1):
        reads.setdefault(self.name, []).append(n)
        return original(self, n)

    monkeypatch.setattr(zipfile.ZipExtFile, "read", spy)
    raw = ogb.read(cfg_for(tmp_path))
    assert np.array_equal(raw.nodes[NODE].x, x16.astype(np.float32))
    data = reads["node_feat.npy"][-8:]  # after the header reads: ceil(50 / 8) blocks, one probe
    assert data == [8 * F * 2] * 6 + [2 * F * 2, 1]
    edges = reads["edge_index.npy"]
    assert -1 not in edges and max(edges) == 8 * 2 * 8 and len(edges) > 60 // 8  # 8 edges


def test_float16_features_become_float32(tmp_path):
    x16 = (reference()["x"] + np.float32(0.1)).astype(np.float16)  # 0.1 is inexact in float16
    write_binary(tmp_path, graph={"node_feat": x16})
    raw = ogb.read(cfg_for(tmp_path))
    assert raw.nodes[NODE].x.dtype == np.float32
    assert np.array_equal(raw.nodes[NODE].x, x16.astype(np.float32))
    assert not np.array_equal(raw.nodes[NODE].x, reference()["x"] + np.float32(0.1))  # the float16 values


def test_fortran_order_and_integer_arrays_read_right(tmp_path, monkeypatch):
    monkeypatch.setattr(ogb, "NPZ_BLOCK_ROWS", 6)
    ref = reference()
    x_int = np.asfortranarray((ref["x"] * 100).astype(np.int32))
    edges = np.asfortranarray(ref["edge_index"].astype(np.int32))
    write_binary(tmp_path, compressed=False, graph={"node_feat": x_int, "edge_index": edges},
                 labels={"node_label": np.nan_to_num(ref["label"], nan=3).astype(np.int64)})
    with zipfile.ZipFile(tmp_path / "raw" / "data.npz") as archive, \
            archive.open("node_feat.npy") as fp:
        np.lib.format.read_magic(fp)
        assert np.lib.format.read_array_header_1_0(fp)[1]  # really Fortran order on disk
    raw = ogb.read(cfg_for(tmp_path))
    assert np.array_equal(raw.nodes[NODE].x, x_int.astype(np.float32))
    assert np.array_equal(np.stack([raw.relations[EDGE].src, raw.relations[EDGE].dst]), ref["edge_index"])
    assert np.array_equal(raw.y, np.where(ref["codes"] < 0, 0, ref["codes"]))  # NaN -> 3


def test_prepare_writes_the_binary_graph_with_its_labels_and_split(tmp_path, monkeypatch):
    ref = write_binary(tmp_path / "in", compressed=False)
    monkeypatch.chdir(tmp_path)
    Path("params.yaml").write_text(yaml.safe_dump({"dataset": {
        "source": "ogb", "path": str(tmp_path / "in"), "undirected": False}}))
    assert main(["prepare"]) == 0
    report = json.loads(Path("metrics/prepare.json").read_text())
    labelled = int((ref["codes"] >= 0).sum())
    assert report["labelled_nodes"] == labelled == 37
    assert report["label_coverage"] == {"labelled": labelled, "unlabelled": N - labelled,
                                        "labelled_fraction": round(labelled / N, 6)}
    assert report["classes"] == 3 and report["edges"] == ref["edge_index"].shape[1]
    assert report["public_split"] == {"train": 25, "val": 10, "test": 10, "unused": 5}
    assert io.read_classes(Path("data/prepared")).to_pylist() == CLASSES
    graph = io.read_graph(Path("data/prepared")).target_view()
    assert torch.equal(graph.x, torch.from_numpy(ref["x"]))
    assert torch.equal(graph.y, torch.from_numpy(ref["codes"]))
    got = graph.csr.edge_index().numpy()
    want = ref["edge_index"]
    assert np.array_equal(got[:, np.lexsort(got[::-1])], want[:, np.lexsort(want[::-1])])
    assert_roles(graph.public_roles.numpy())


def _corrupt_member_data(path: Path) -> None:
    """Flip a byte inside node_feat's stored values (the CRC then fails)."""
    data = bytearray(path.read_bytes())
    at = bytes(data).index(reference()["x"].tobytes()[:64]) + 20
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


ref_x = reference()["x"]
E = reference()["edge_index"].shape[1]
bad_edges = reference()["edge_index"].copy()
bad_edges[1, 33] = N
nan_x = ref_x.copy()
nan_x[33, 2] = np.inf
labels_1_5 = reference()["label"].copy()
labels_1_5[4] = 1.5
labels_neg = reference()["label"].copy()
labels_neg[4] = -1

# case: (data.npz changes, node-label.npz changes, what else to do, message)
BAD = {
    "missing labels file": ({}, {}, "drop labels", r"node-label\.npz: file not found"),
    "missing arrays": ({"node_feat": None, "num_nodes_list": None}, {}, None,
                       r"data\.npz: missing arrays node_feat, num_nodes_list; found: "
                       r"edge_index, node_year, num_edges_list$"),
    "missing label array": ({}, {"node_label": None, "labels": np.zeros(N)}, None,
                            r"node-label\.npz: missing array node_label; found: labels$"),
    "feature rows": ({"node_feat": ref_x[:-1]}, {}, None,
                     r"data\.npz: node_feat has shape \(49, 4\) but num_nodes_list says 50 "
                     r"nodes"),
    "edge_index (E, 2)": ({"edge_index": reference()["edge_index"].T.copy()}, {}, None,
                          rf"data\.npz: edge_index has shape \({E}, 2\); expected \(2, E\)"),
    "float edge ids": ({"edge_index": reference()["edge_index"].astype(np.float64)}, {}, None,
                       r"data\.npz: edge_index holds float64; expected integer node ids"),
    "edge id out of range": ({"edge_index": bad_edges}, {}, None,
                             r"data\.npz: edge_index row 1 \(dst\) has node id 50 \(edge 33\) "
                             r"outside \[0, 50\)"),
    "two graphs": ({"num_nodes_list": np.array([20, 30])}, {}, None,
                   r"data\.npz: num_nodes_list is int64 \[2\] \[20, 30\]; expected one integer"),
    "edge count": ({"num_edges_list": np.array([E + 1])}, {}, None,
                   rf"data\.npz: num_edges_list says \[{E + 1}\] but edge_index has {E} edges"),
    "non-finite feature": ({"node_feat": nan_x}, {}, None,
                           r"data\.npz: feature column 'node_feat\[:, 2\]' has NaN or inf in 1 "
                           r"rows \(first: row 33\)"),
    "object features": ({"node_feat": np.array([[1.0]] * N, dtype=object)}, {}, None,
                        r"data\.npz: array 'node_feat' holds object; expected numbers"),
    "label rows": ({}, {"node_label": reference()["label"][:-1]}, None,
                   r"node-label\.npz: node_label has shape \(49, 1\); expected \(50, 1\)"),
    "multi-task": ({}, {"node_label": np.zeros((N, 3))}, None,
                   r"node-label\.npz: node_label has 3 columns: multi-task labels \(as "
                   r"ogbn-proteins\) are not supported"),
    "non-integer label": ({}, {"node_label": labels_1_5}, None,
                          r"node-label\.npz: label column 'node_label' holds a non-integer "
                          r"class 1\.5 \(row 4\)"),
    "negative label": ({}, {"node_label": labels_neg}, None,
                       r"node-label\.npz: node_label has negative class -1\.0 \(row 4\); OGB "
                       r"marks unlabelled nodes with NaN"),
    "not a zip": ({}, {}, "text data", r"data\.npz: not a readable \.npz file"),
    "truncated zip": ({}, {}, "truncate data", r"data\.npz: not a readable \.npz file"),
    "corrupted member": ({}, {}, "corrupt data",
                         r"data\.npz: array 'node_feat' is not readable, the file looks "
                         r"corrupted \(Bad CRC-32"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_binary_inputs_fail_in_one_line_naming_the_file(tmp_path, monkeypatch, capsys,
                                                            case):
    monkeypatch.setattr(ogb, "NPZ_BLOCK_ROWS", 7)  # rows and edges past the first block
    graph, labels, action, message = BAD[case]
    root = tmp_path / "in"
    write_binary(root, compressed=action != "corrupt data", graph=graph, labels=labels)
    data = root / "raw" / "data.npz"
    if action == "drop labels":
        (root / "raw" / "node-label.npz").unlink()
    elif action == "text data":
        data.write_text("edge_index,node_feat\n")
    elif action == "truncate data":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    elif action == "corrupt data":
        _corrupt_member_data(data)
    with pytest.raises(ValueError, match=message) as err:
        ogb.read(cfg_for(root))
    assert "\n" not in str(err.value)
    monkeypatch.chdir(tmp_path)
    Path("params.yaml").write_text(yaml.safe_dump({"dataset": {"source": "ogb",
                                                               "path": str(root)}}))
    assert main(["prepare"]) == 1
    printed = capsys.readouterr().err.strip()
    assert "\n" not in printed and str(err.value) in printed
    assert not Path("data/prepared").exists() and not Path("metrics/prepare.json").exists()


@pytest.mark.parametrize("rows, message", [
    (N - 3, r"data\.npz: array 'node_feat' is truncated \(188 of 200 values\)"),
    (N + 1, r"data\.npz: array 'node_feat' has more data than its shape \(50, 4\) holds"),
])
def test_a_member_whose_data_disagrees_with_its_header_is_refused(tmp_path, monkeypatch, rows,
                                                                   message):
    monkeypatch.setattr(ogb, "NPZ_BLOCK_ROWS", 7)
    write_binary(tmp_path)
    data = tmp_path / "raw" / "data.npz"
    with zipfile.ZipFile(data) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    npy = BytesIO()  # the header says (N, F); the values hold `rows` rows
    np.lib.format.write_array_header_1_0(npy, {"descr": "<f4", "fortran_order": False,
                                               "shape": (N, F)})
    members["node_feat.npy"] = npy.getvalue() + np.zeros((rows, F), np.float32).tobytes()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, payload in members.items():
            archive.writestr(name, payload)
    with pytest.raises(ValueError, match=message):
        ogb.read(cfg_for(tmp_path))
