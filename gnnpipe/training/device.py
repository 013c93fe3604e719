"""Where training runs (``train.device: auto | cpu | cuda``), decided once at the start of the
train stage, and the one move of data onto it.

``resolve`` turns the setting into a ``torch.device`` (``auto``: CUDA when torch sees one, else
the CPU; a DDP rank on CUDA gets ``cuda:LOCAL_RANK``). ``to_device`` is the only place tensors go
to the accelerator: the loop calls it on every batch at the ``task.step`` boundary and once on
what a task holds for the whole run (``Task.place``); it walks tensors, PyG ``Data`` /
``HeteroData`` (a shallow copy: the loader's own object keeps its CPU tensors), dataclasses
(``PhaseInput``, the loaders' ``LossBatch``), dicts, lists and tuples. On CUDA every
batch tensor is pinned and copied with ``non_blocking=True`` (the host goes on meanwhile);
on the CPU nothing is touched, so the CPU pipeline runs exactly the code and bits it ran before.
``to_cpu`` brings results, best weights and checkpoints back; ``on_cpu`` gives engines that
compute on the CPU (layer-wise evaluation, shard evaluators) a CPU copy of the model.
"""

from __future__ import annotations

import copy
import dataclasses
import weakref
from typing import Any

import torch
from torch import nn

from gnnpipe.training.distributed import SINGLE, DistContext

CPU = torch.device("cpu")
# model on an accelerator -> its CPU twin (``on_cpu``): one object per model, so memos keyed on
# the model's id (gnnpipe.training.inference.WeightMemo) behave as on the CPU, alike on every DDP
# rank
_TWINS: "weakref.WeakKeyDictionary[nn.Module, nn.Module]" = weakref.WeakKeyDictionary()


def cuda_available() -> bool:
    """torch.cuda.is_available(), looked up here so tests can pretend a CUDA machine."""
    return torch.cuda.is_available()


def resolve(setting: str, ctx: DistContext = SINGLE, key: str = "train.device") -> torch.device:
    """``auto`` | ``cpu`` | ``cuda`` -> the device this rank trains on.

    ``cuda`` without a CUDA device raises one line naming ``key``; under DDP each rank takes
    ``cuda:<local_rank>``, so the ranks on one machine use one GPU each."""
    if setting == "cpu" or (setting == "auto" and not cuda_available()):
        return CPU
    if not cuda_available():
        raise ValueError(f"{key}=cuda but torch {torch.__version__} sees no CUDA device on this "
                         f"machine; set {key}: auto or cpu")
    return torch.device("cuda", ctx.local_rank)


def amp_dtype(device: torch.device) -> torch.dtype:
    """Autocast dtype: bfloat16 on CPU (no scaler needed), float16 on CUDA (with a GradScaler)."""
    return torch.bfloat16 if device.type == "cpu" else torch.float16


def grad_scaler(device: torch.device, amp: bool) -> torch.amp.GradScaler | None:
    """A GradScaler for float16 autocast (CUDA); None where the loop steps without one."""
    return torch.amp.GradScaler(device.type) if amp and amp_dtype(device) == torch.float16 \
        else None


def to_device(obj: Any, device: torch.device, memo: dict | None = None, pin: bool = True) -> Any:
    """``obj`` with every tensor inside it on ``device`` (``obj`` itself on the CPU).

    ``memo`` (id -> moved tensor) moves a tensor shared by several inputs once. ``pin`` False
    copies without page-locking first: for one-off copies of whole-graph inputs (``Task.place``),
    where a pinned twin of a large feature matrix would cost host memory and gain nothing."""
    if device.type == "cpu":
        return obj
    return _move(obj, device, {} if memo is None else memo, pin)


def to_cpu(obj: Any) -> Any:
    """``obj`` with every tensor inside it on the CPU (tensors already there are kept as they
    are: no copy)."""
    return _move(obj, CPU, {}, pin=False)


def model_device(model: nn.Module) -> torch.device:
    """Where ``model``'s weights are (the CPU for a model without parameters)."""
    param = next(model.parameters(), None)
    return CPU if param is None else param.device


def on_cpu(model: nn.Module) -> nn.Module:
    """``model`` when its weights are on the CPU, else its CPU twin: the same object on every
    call, holding ``model``'s current weights and train / eval mode."""
    if model_device(model).type == "cpu":
        return model
    twin = _TWINS.get(model)
    if twin is None:
        twin = _TWINS[model] = copy.deepcopy(model).to(CPU)
    else:
        twin.load_state_dict(model.state_dict())
    return twin.train(model.training)


def state_on_cpu(model: nn.Module) -> dict:
    """A copy of ``model.state_dict()`` on the CPU (best weights, saved models)."""
    state = model.state_dict()
    if all(not isinstance(v, torch.Tensor) or v.device.type == "cpu" for v in state.values()):
        return copy.deepcopy(state)
    return {k: v.detach().to(CPU) if isinstance(v, torch.Tensor) else copy.deepcopy(v)
            for k, v in state.items()}


def _tensor(t: torch.Tensor, device: torch.device, memo: dict, pin: bool) -> torch.Tensor:
    if t.device == device or (device.index is None and t.device.type == device.type):
        return t
    key = id(t)
    if key not in memo:
        if pin and device.type == "cuda" and t.device.type == "cpu":
            # pinned (page-locked) host memory lets the copy run asynchronously
            memo[key] = t.pin_memory().to(device, non_blocking=True)
        else:
            memo[key] = t.to(device)
        memo[key, "source"] = t  # keeps ``t`` alive so its id is not reused while memo lives
    return memo[key]


def _move(obj: Any, device: torch.device, memo: dict, pin: bool) -> Any:
    """``obj`` itself when nothing inside it moves (ids stay stable), else a moved copy."""
    if isinstance(obj, torch.Tensor):
        return _tensor(obj, device, memo, pin)
    if isinstance(obj, dict):
        items = {k: _move(v, device, memo, pin) for k, v in obj.items()}
        same = all(items[k] is v for k, v in obj.items())
        return obj if same else type(obj)(items)
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        values = [_move(v, device, memo, pin) for v in obj]
        return obj if all(a is b for a, b in zip(values, obj)) else type(obj)(values)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = {f.name: _move(getattr(obj, f.name), device, memo, pin)
                  for f in dataclasses.fields(obj) if f.init}
        same = all(value is getattr(obj, name) for name, value in fields.items())
        return obj if same else dataclasses.replace(obj, **fields)
    from torch_geometric.data.data import BaseData  # PyG is imported by every batch kind

    if isinstance(obj, BaseData):  # Data, HeteroData, Batch: each store's tensors
        if all(t.device == device for _, t in _data_tensors(obj)):
            return obj
        return copy.copy(obj).apply(lambda t: _tensor(t, device, memo, pin))
    return obj


def _data_tensors(data) -> list:
    return [(k, v) for store in data.stores for k, v in store.items()
            if isinstance(v, torch.Tensor)]
