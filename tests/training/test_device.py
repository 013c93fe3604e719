"""train.device on a CPU-only machine: what a CPU test can show of the CUDA path.

torch here has no CUDA, so nothing below runs a kernel on a GPU. What is checked: the setting
resolves (and ``cuda`` is refused in one line); ``to_device`` reaches every tensor of every batch
kind the loop sees (moved to the ``meta`` device, which any tensor can go to); the loop sends
every batch and the task's inputs through it and nothing else; the GradScaler path of the loop
(with a CPU GradScaler standing in for CUDA's) trains to the same weights and its state
survives a checkpoint and a resume; the smoke script stops cleanly without a GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch_geometric.data import Batch, Data, HeteroData

from gnnpipe.training import device as devices
from gnnpipe import io
from gnnpipe.training import distributed, loop
from gnnpipe.config import NeighborParams, ShadowParams, TrainParams
from gnnpipe.training.distributed import DistContext
from gnnpipe.training.loop import Checkpointing, LoopOptions
from gnnpipe.training.models import build_model
from gnnpipe.sampling.cluster import ClusterLoader, GraphParts
from gnnpipe.sampling.loader import neighbor_loader
from gnnpipe.sampling.saint import SaintLoader, SaintSampler, estimate_norm
from gnnpipe.sampling import batch as adapt
from gnnpipe.sampling.batch import LossBatch
from gnnpipe.sampling.builders import neighbor_batches
from gnnpipe.sampling.shadow import shadow_loader
from gnnpipe.training.sharding import NodeRows
from gnnpipe.training.train import PhaseInput, build_inputs, fit

ROOT = Path(__file__).resolve().parents[2]
META = torch.device("meta")


# ------------------------------------------------------------------------------ resolve
def test_auto_and_cpu_resolve_to_the_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    assert devices.resolve("auto") == devices.resolve("cpu") == torch.device("cpu")


def test_cuda_without_cuda_is_one_line_naming_the_key(monkeypatch):
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    with pytest.raises(ValueError, match=r"^train\.device=cuda but torch .* no CUDA device") as err:
        devices.resolve("cuda")
    assert "\n" not in str(err.value) and "train.device: auto or cpu" in str(err.value)


def test_with_cuda_auto_and_cuda_take_the_local_rank(monkeypatch):
    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    rank = DistContext(rank=5, world_size=8, local_rank=1)
    assert devices.resolve("auto", rank) == devices.resolve("cuda", rank) == torch.device("cuda", 1)
    assert devices.resolve("cuda") == torch.device("cuda", 0)
    assert devices.resolve("cpu", rank) == torch.device("cpu")


def test_the_train_stage_refuses_cuda_in_one_line_before_reading_anything(
        tmp_path, monkeypatch, capsys):
    from gnnpipe.cli import main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"train": {"device": "cuda"}}))
    assert main(["train"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "train.device=cuda" in err and "Traceback" not in err


def test_backend_follows_the_device():
    assert distributed.backend_for(None) == distributed.backend_for(torch.device("cpu")) == "gloo"
    assert distributed.backend_for(torch.device("cuda", 1)) == "cpu:gloo,cuda:nccl"


def test_amp_dtype_and_scaler_follow_the_device():
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert devices.amp_dtype(cpu) == torch.bfloat16 and devices.amp_dtype(cuda) == torch.float16
    assert devices.grad_scaler(cpu, amp=True) is None  # bfloat16 needs no loss scaling
    assert devices.grad_scaler(cuda, amp=False) is None
    if torch.cuda.is_available():
        assert devices.grad_scaler(cuda, amp=True).is_enabled()
    else:
        with pytest.warns(UserWarning):  # torch without CUDA disables the scaler it builds
            assert isinstance(devices.grad_scaler(cuda, amp=True), torch.amp.GradScaler)


# --------------------------------------------------------------------------- to_device
def _tensors(obj, path="batch"):
    """(path, tensor) of every tensor inside ``obj``, found without gnnpipe.training.device's walk."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, (Data, HeteroData)):
        for store in obj.stores:
            for key, value in store.items():
                yield from _tensors(value, f"{path}.{key}")
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _tensors(value, f"{path}[{key!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _tensors(value, f"{path}[{i}]")
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            yield from _tensors(getattr(obj, f.name), f"{path}.{f.name}")


def _graph():
    from conftest import make_tiny_graph

    return make_tiny_graph(40, 3)


@functools.lru_cache(maxsize=1)
def _homogeneous_batches() -> dict:
    """One real batch of each homogeneous sampler on a 40-node ring with chords."""
    graph = _graph()
    roles = np.where(np.arange(40) % 4 == 0, "val", "train")
    train = torch.from_numpy(np.flatnonzero(roles == "train"))
    train_mask, rows = torch.from_numpy(roles == "train"), NodeRows(graph.x, graph.y)
    parts = np.arange(40) % 4
    cluster = ClusterLoader(GraphParts(graph.csr, parts, 4), rows, train_mask,
                            np.bincount(parts[roles == "train"], minlength=4), 2, 0, 1)
    saint = SaintSampler(graph.csr, train, batch_size=8, walk_length=2)
    shadow = ShadowParams(depth=2, num_neighbors=3)
    batches = {
        "full graph rows": train,
        "sign rows": train[:8],
        "neighbor": next(iter(neighbor_loader(graph.x, graph.y, graph.csr, train,
                                              NeighborParams((3, 2)), 0, batch_size=8))),
        "shadow": next(iter(shadow_loader(graph.x, graph.y, graph.csr, train, shadow, 0,
                                          batch_size=4))),
        "shadow pyg": next(iter(shadow_loader(graph.x, graph.y, graph.csr, train,
                                              dataclasses.replace(shadow, layout="pyg"), 0,
                                              batch_size=4))),
        "cluster": next(iter(cluster)),
        "saint": next(iter(SaintLoader(saint, estimate_norm(saint, 4, seed=0), rows, train_mask,
                                       num_steps=1))),
    }
    # link_neighbor: a sampled subgraph with its supervision pairs and labels (local ids)
    batches["link_neighbor"] = batches["neighbor"].clone()
    batches["link_neighbor"].edge_label_index = torch.tensor([[0, 1], [2, 3]])
    batches["link_neighbor"].edge_label = torch.tensor([1.0, 0.0])
    # what the loop moves: each loader's LossBatch (gnnpipe/sampling/batch.py)
    batches["neighbor loss"] = adapt.seeds_first(batches["neighbor"])
    batches["shadow loss"] = adapt.roots(batches["shadow"])
    batches["saint loss"] = adapt.normalized_train_nodes(batches["saint"])
    batches["link_neighbor loss"] = adapt.pairs(batches["link_neighbor"])
    return batches


def _typed_batches() -> dict:
    """The typed batch kinds: PyG HeteroData, and the LossBatch es the typed loaders hand to
    fit (gnnpipe/sampling/batch.py)."""
    x = {"paper": torch.randn(5, 3), "author": torch.randn(4, 2)}
    edges = {("author", "writes", "paper"): torch.tensor([[0, 1], [2, 3]]),
             ("paper", "cites", "paper"): torch.tensor([[0], [1]])}
    hetero = HeteroData()
    for t, value in x.items():
        hetero[t].x = value
    hetero["paper"].y, hetero["paper"].batch_size = torch.arange(5), 2
    for e, value in edges.items():
        hetero[e].edge_index = value
    return {"typed HeteroData": hetero,
            "typed seeds": adapt.typed_seeds_first("paper")(hetero),
            "typed link": LossBatch(x, edges, torch.tensor([1.0, 0.0]),
                                    pairs=torch.tensor([[0, 1], [5, 6]]))}


@pytest.mark.parametrize("kind", ["full graph rows", "sign rows", "neighbor", "shadow",
                                  "shadow pyg", "cluster", "saint", "link_neighbor",
                                  "neighbor loss", "shadow loss", "saint loss",
                                  "link_neighbor loss", "typed HeteroData", "typed seeds",
                                  "typed link"])
def test_every_batch_kind_has_every_tensor_moved_and_the_loaders_copy_left_alone(kind):
    batch = {**_homogeneous_batches(), **_typed_batches()}[kind]
    before = list(_tensors(batch))
    assert before and all(t.device.type == "cpu" for _, t in before)
    moved = devices.to_device(batch, META)
    after = list(_tensors(moved))
    assert [p for p, _ in after] == [p for p, _ in before]  # nothing dropped or added
    assert [p for p, t in after if t.device != META] == []
    assert [(t.shape, t.dtype) for _, t in after] == [(t.shape, t.dtype) for _, t in before]
    assert all(t.device.type == "cpu" for _, t in _tensors(batch))  # a cached batch stays valid
    if isinstance(batch, (Data, Batch)):  # the things fit reads besides tensors survive
        assert type(moved) is type(batch)
        assert set(moved.keys()) == set(batch.keys())
        if "batch_size" in batch:
            assert moved.batch_size == batch.batch_size


def test_phase_inputs_move_once_per_shared_tensor_and_keep_their_engine():
    graph = _graph()
    engine = object()  # a layer-wise engine stays as it is (it computes on the CPU)
    shared = PhaseInput(graph.x, graph.csr.edge_index(), engine)
    inputs = {"train": shared, "val": shared, "test": PhaseInput(graph.x, None)}
    memo: dict = {}
    moved = {p: devices.to_device(i, META, memo) for p, i in inputs.items()}
    assert moved["train"].x.device == META and moved["train"].edge_index.device == META
    assert moved["train"].x is moved["val"].x is moved["test"].x  # x went over once
    assert moved["train"].layerwise is engine and moved["test"].edge_index is None


def test_on_the_cpu_nothing_is_copied():
    batch = _homogeneous_batches()["neighbor"]
    assert devices.to_device(batch, torch.device("cpu")) is batch
    x = torch.randn(3, 2)
    assert devices.to_cpu({"x": x})["x"] is x
    model = torch.nn.Linear(2, 2)
    assert devices.on_cpu(model) is model and devices.model_device(model).type == "cpu"
    state = devices.state_on_cpu(model)
    assert torch.equal(state["weight"], model.weight)
    assert state["weight"].data_ptr() != model.weight.data_ptr()  # a snapshot, not a view


def test_nothing_on_the_cpu_is_rebuilt_so_ids_stay_stable():
    """Layer-wise evaluation memoises on ``id(x)`` and its DDP ranks must all hit or all miss:
    ``to_cpu`` of CPU data hands back the very objects (a rebuilt dict whose id is reused on one
    rank only once hung two gloo ranks), and the engine sees the phase's own ``x`` each call."""
    from gnnpipe.training.train import _evaluate

    typed = _typed_batches()
    for obj in [{"a": torch.ones(2)}, [torch.ones(1)], typed["typed seeds"],
                typed["typed HeteroData"], _homogeneous_batches()["neighbor"]]:
        assert devices.to_cpu(obj) is obj
    seen = []

    def engine(model, x, ctx):
        seen.append(x)
        return torch.zeros(5, 3)

    x = typed["typed seeds"].x
    inputs = PhaseInput(x, typed["typed seeds"].edge_index, engine)
    for _ in range(2):
        _evaluate(torch.nn.Linear(2, 3), inputs, torch.arange(2), distributed.SINGLE)
    assert seen[0] is x and seen[1] is x


def test_the_loop_moves_each_batch_and_the_task_inputs_through_to_device_only(monkeypatch):
    """Every step's batch reaches ``task.step`` through ``to_device`` (with the loop's device),
    and the whole-graph inputs through ``Task.place``: a recorder in place of the move."""
    graph = _graph()
    roles = np.where(np.arange(40) % 4 == 0, "val", "train")
    roles[1::8] = "test"
    seen, placed, stepped = [], [], []
    real = devices.to_device

    def record(obj, device, memo=None, pin=True):
        seen.append((type(obj).__name__, device, pin))
        return real(obj, device, memo, pin)

    monkeypatch.setattr(devices, "to_device", record)
    from gnnpipe.training.train import NodeTask

    original_step, original_place = NodeTask.step, NodeTask.place
    monkeypatch.setattr(NodeTask, "step", lambda self, model, batch: (
        stepped.append(batch), original_step(self, model, batch))[1])
    monkeypatch.setattr(NodeTask, "place", lambda self, device: (
        placed.append(device), original_place(self, device))[1])
    cfg = TrainParams(epochs=2, patience=2, hidden=8, neighbor=NeighborParams((3, 2)))
    train = torch.from_numpy(np.flatnonzero(roles == "train"))
    loader = neighbor_batches(graph.x, graph.y, graph.csr, train, cfg.neighbor, 0, batch_size=8)
    inputs = build_inputs(graph.x, message_graphs={p: graph.csr for p in ("train", "val",
                                                                          "test")})
    result = fit(lambda: build_model("sage", 2, 3, cfg), inputs, graph.y, io.role_codes(roles),
                 cfg, 0, loader=loader)
    cpu = torch.device("cpu")
    assert placed == [cpu]
    batches = [entry for entry in seen if entry[0] == "LossBatch"]
    assert len(batches) == len(stepped) == 2 * len(loader)
    assert all(d == cpu and pin for _, d, pin in batches)  # batches pinned, on CUDA
    assert ("PhaseInput", cpu, False) in seen  # the whole-graph inputs once, unpinned
    assert result.perf["device"] == "cpu"  # recorded beside the thread count
    assert result.perf["threads"] == torch.get_num_threads()


# ------------------------------------------------------------------------- GradScaler
class CountingScaler(torch.amp.GradScaler):
    """CPU's GradScaler (the loop gets it where CUDA would get CUDA's), counting its calls."""

    scaled = 0

    def scale(self, outputs):
        CountingScaler.scaled += 1
        return super().scale(outputs)


def _toy():
    from test_loop import ToyTask, _build

    return ToyTask, _build


def test_grad_scaler_path_trains_the_same_weights_and_checkpoints_its_state(monkeypatch):
    """Scaling the loss by 2**16 and unscaling the gradients is exact in float32, so the
    scaler path must end on the unscaled run's weights; a step taken outside the scaler would
    not (gradients 65536x), nor would a scaler left out of the checkpoint."""
    ToyTask, build = _toy()
    cfg = TrainParams(epochs=4, patience=4, lr=0.05)
    plain = loop.run(ToyTask(), build, cfg, 3)
    monkeypatch.setattr(devices, "grad_scaler", lambda device, amp: CountingScaler("cpu"))
    CountingScaler.scaled = 0
    saved = []
    scaled = loop.run(ToyTask(), build, cfg, 3, LoopOptions(checkpointing=Checkpointing(
        every=1, save=saved.append)))
    assert CountingScaler.scaled == 4 * 4  # 4 batches of 8 rows per epoch
    for key, value in plain.model.state_dict().items():
        assert torch.equal(value, scaled.model.state_dict()[key]), key
    assert [p["scaler"]["_growth_tracker"] for p in saved] == [4, 8, 12, 16]
    assert saved[-1]["scaler"]["scale"] == 65536.0
    assert all(t.device.type == "cpu" for _, t in _tensors(saved[-1]["model"]))


def test_a_resumed_run_continues_the_scaler_from_its_checkpoint_file(monkeypatch, tmp_path):
    ToyTask, build = _toy()
    cfg = TrainParams(epochs=4, patience=4, lr=0.05)
    monkeypatch.setattr(devices, "grad_scaler", lambda device, amp: CountingScaler(
        "cpu", growth_interval=3))  # grows the scale every 3 clean steps: state that matters
    path = tmp_path / "train.pt"
    whole, killed = [], []
    loop.run(ToyTask(), build, cfg, 3, LoopOptions(checkpointing=Checkpointing(
        every=1, save=whole.append)))

    def save_then_die(payload):
        io.write_checkpoint(path, payload, "fp")  # weights_only-loadable, scaler included
        killed.append(payload)
        if payload["epoch"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        loop.run(ToyTask(), build, cfg, 3, LoopOptions(checkpointing=Checkpointing(
            every=1, save=save_then_die)))
    on_disk = io.read_checkpoint(path, "fp")
    assert on_disk["scaler"] == whole[1]["scaler"] and on_disk["scaler"]["scale"] > 65536.0
    resumed = []
    loop.run(ToyTask(), build, cfg, 3, LoopOptions(checkpointing=Checkpointing(
        every=1, save=resumed.append, resume_from=on_disk)))
    assert [p["epoch"] for p in resumed] == [3, 4]
    assert resumed[-1]["scaler"] == whole[-1]["scaler"]
    for key, value in whole[-1]["model"].items():
        assert torch.equal(value, resumed[-1]["model"][key]), key


# ------------------------------------------------------------------------ smoke script
def test_gpu_smoke_script_stops_in_one_line_without_a_gpu(tmp_path):
    if shutil.which("nvidia-smi", path="/usr/bin:/bin"):
        pytest.skip("this machine has nvidia-smi")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GPU_SMOKE_DEVICE_NODE":
           str(tmp_path / "nvidia0")}  # no nvidia-smi on PATH, no device node
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_smoke.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and "no CUDA GPU" in lines[0] and "skipped" in lines[0]
    assert os.listdir(tmp_path) == []  # nothing built, nothing copied


def test_gpu_smoke_script_names_the_fix_when_its_venv_has_no_cuda_torch(tmp_path):
    node = tmp_path / "nvidia0"
    node.touch()  # a GPU machine, as far as the script can tell
    venv = Path(sys.prefix)  # the venv running the tests
    if not (venv / "bin" / "python").exists() or torch.cuda.is_available():
        pytest.skip("needs the CPU-only venv the tests run in")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GPU_SMOKE_DEVICE_NODE": str(node),
           "GPU_SMOKE_VENV": str(venv), "GPU_SMOKE_SETUP": "0"}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_smoke.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, lines
    assert "no torch that sees a CUDA device" in lines[0] and "pip install" in lines[0]
