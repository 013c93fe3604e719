"""Neighbor and link-neighbor training on two machines over loopback (issue 43 item 2).

Each machine is ``gnnpipe train --params m<k>.yaml`` in the same folder (the shared filesystem
the ranks sample from: memory-mapped prepared / split files), ``train.dist.nnodes: 2`` with one
rank each, a c10d rendezvous on 127.0.0.1. The DDP contract (docs/training.md): the seeds (or
supervision pairs) are split in equal shares and the gradients averaged, so with every in-edge
taken (fan-out -1: no sampling draw), no dropout and one batch per rank per epoch, each step's
averaged gradient is the gradient of one process's batch of all the seeds, and the trained
weights and outputs equal one process's to float rounding. The two ranks evaluate layer by layer
(``train.inference.mode: auto`` on several ranks), one process with a whole-graph forward: the
same outputs to 1e-5 (gnnpipe/training/inference.py).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from conftest import run_stages
from gnnpipe import io
from gnnpipe.data.graph import ROLE_CODES

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 240  # two launchers, two agents, two ranks: each imports torch (16 s at load 8)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _params(folder: Path, task: str, sampler: str) -> dict:
    """The shipped params on a 150-node synthetic graph: one batch of every seed, fan-out -1."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["dataset"]["task"] = task
    params["dataset"]["synthetic"].update(num_nodes=150, num_features=8, num_classes=3)
    params["train"].update(sampler=sampler, model="sage", num_layers=2, hidden=8, dropout=0.0,
                           epochs=2, patience=2, batch_size=4096, checkpoint={"every": 0},
                           neighbor={**params["train"]["neighbor"], "num_neighbors": [-1, -1]})
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    return params


def _two_machines(folder: Path, params: dict) -> Path:
    """The train stage as two machines of one rank each; the output folder global rank 0 wrote
    (the rendezvous picks which machine holds it)."""
    endpoint = f"127.0.0.1:{_free_port()}"
    procs = []
    for node_rank in (0, 1):
        mine = {**params, "train": {**params["train"], "dist": {
            **params["train"]["dist"], "nproc": 1, "nnodes": 2, "node_rank": node_rank,
            "rdzv_endpoint": endpoint, "rdzv_timeout_s": 120}}}
        (folder / f"m{node_rank}.yaml").write_text(yaml.safe_dump(mine))
        # each machine holds its own stage lock: its own --out (only rank 0 writes)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "gnnpipe", "train", "--params", f"m{node_rank}.yaml",
             "--out", f"data/model{node_rank}"], cwd=folder, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "GNNPIPE_PROGRESS": "0", "PYTHONPATH": str(REPO)}))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    written = [folder / f"data/model{k}" for k in (0, 1) if (folder / f"data/model{k}").exists()]
    assert len(written) == 1, written  # one writer: global rank 0
    return written[0]


def _one_process(folder: Path) -> Path:
    """The train stage in one process (in this one), its outputs moved aside."""
    run_stages(folder, ("prepare", "split", "train"))
    shutil.move(folder / "data/model", folder / "data/one")
    shutil.move(folder / "metrics/train.json", folder / "metrics/one.json")
    return folder / "data/one"


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return io.read_model_file(model_dir)["state_dict"]


def _assert_same_weights(one: Path, two: Path) -> None:
    a, b = _weights(one), _weights(two)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-5, msg=name)


def test_neighbor_on_two_machines_equals_one_process(tmp_path):
    params = _params(tmp_path, "node", "neighbor")
    one = _one_process(tmp_path)
    roles = io.read_typed_role_codes(tmp_path / "data/split")
    seeds = int((roles == ROLE_CODES["train"]).sum())
    assert seeds % 2 == 0, "equal shares need no padding for the one-process equality"
    two = _two_machines(tmp_path, params)
    _assert_same_weights(one, two)
    ids_one, logits_one = io.read_predictions(one)
    ids_two, logits_two = io.read_predictions(two)
    assert torch.equal(ids_two, ids_one)  # every split node once, in fit's order
    torch.testing.assert_close(logits_two, logits_one, rtol=1e-4, atol=1e-5)
    train = json.loads((tmp_path / "metrics/train.json").read_text())
    assert train["epochs_run"] == 2 and train["sampler"] == "neighbor"
    perf = json.loads((tmp_path / "metrics/perf/train.json").read_text())
    assert perf["world_size"] == 2 and perf["eval_inference"] == "layerwise"


def test_link_neighbor_on_two_machines_equals_one_process(tmp_path):
    params = _params(tmp_path, "link", "link_neighbor")
    one = _one_process(tmp_path)
    pairs = io.read_link_edges(tmp_path / "data/split", 150)["train_supervision"].shape[1]
    assert pairs % 2 == 0, "equal shares need no padding for the one-process equality"
    two = _two_machines(tmp_path, params)
    _assert_same_weights(one, two)
    scores_one, scores_two = io.read_link_predictions(one), io.read_link_predictions(two)
    assert scores_one.keys() == scores_two.keys()
    for phase, (pos, neg) in scores_one.items():
        torch.testing.assert_close(scores_two[phase][0], pos, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(scores_two[phase][1], neg, rtol=1e-4, atol=1e-5)
    train = json.loads((tmp_path / "metrics/train.json").read_text())
    assert train["epochs_run"] == 2 and train["batches_per_epoch"] == 1  # per rank
    perf = json.loads((tmp_path / "metrics/perf/train.json").read_text())
    assert perf["world_size"] == 2 and perf["eval_inference"] == "layerwise"
