"""evaluate.seeds: the GNN and the structure-free baseline the baseline stage chose, retrained
under derived seeds on the same split, features and params, each scored on the test nodes.

Only the training randomness varies (initialisation, dropout, batch order, sampled neighbours):
the split stays the pipeline's, so the spread is the models', not the test set's. The first
seed is the pipeline seed, whose models train and baseline already wrote; each other run is the
train command's own node variant (``gnnpipe.commands.train.train_nodes``: every sampler and
engine, on one process) and the baseline's fit, with ``seed`` replaced by a seed drawn from the
stream ``evaluate.seeds`` of the pipeline seed. The GNN's outputs go to a folder of the stage's
run scratch (removed when the stage exits) and are read back from there.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from gnnpipe import io
from gnnpipe.config import replace
from gnnpipe.data.graph import Graph
from gnnpipe.io.atomic import staged
from gnnpipe.pipeline import STAGES
from gnnpipe.reporting.evaluate import judged_gap, on_test
from gnnpipe.reporting.verdict import judge, over_seeds, seed_run
from gnnpipe.runtime.rng import make_rng
from gnnpipe.splitting.inputs import read_model_typed
from gnnpipe.training import device as devices
from gnnpipe.training.baseline_fit import FIT_NODES
from gnnpipe.training.distributed import SINGLE

# gnnpipe.commands.train imports PyG and the training loop (seconds): imported in
# ``retrain_nodes``, so that evaluate.seeds: 1 does not pay for them


def derived_seeds(seed: int, count: int) -> list[int]:
    """``count`` training seeds: ``seed`` itself first (the pipeline's models), then draws of
    the stream ``evaluate.seeds`` of ``seed`` (the first k are the same for any count >= k)."""
    draws = make_rng(seed, "evaluate.seeds").integers(0, 2**31 - 1, size=count - 1)
    return [seed, *(int(d) for d in draws)]


def retrained_seeds(args, params, graph: Graph, roles: np.ndarray, baseline: str,
                    first: dict, metric: str = "accuracy") -> dict:
    """eval.json's ``seeds`` (gnnpipe/reporting/verdict.py ``over_seeds``): ``first`` is the
    pipeline seed's run, the other ``evaluate.seeds - 1`` are retrained here, each judged on
    test ``metric`` (the resolved ``evaluate.metric``) and its gap bootstrapped as the first
    one; ``graph`` as prepared, ``roles`` int8 (N_target,) role codes."""
    cfg, runs, y = params.evaluate, [first], graph.y.numpy()
    features = read_model_typed(args, graph=graph).graph  # the baseline's inputs, every seed
    for seed in derived_seeds(params.seed, cfg.seeds)[1:]:
        gnn_pred, base_pred = retrain_nodes(args, params, seed, baseline, features, roles)
        y_test, gnn_test = on_test(*gnn_pred, y, roles)
        _, base_test = on_test(*base_pred, y, roles)
        gap, gnn_value, base_value = judged_gap(metric, y_test, gnn_test, base_test,
                                                graph.num_classes, cfg.bootstrap, params.seed)
        runs.append(seed_run(seed, gnn_value, base_value, gap, judge(gap, cfg.min_gain)))
    return over_seeds(runs)


def retrain_nodes(args, params, seed: int, baseline: str, graph: Graph,
                  roles: np.ndarray) -> tuple[tuple, tuple]:
    """``(node_id, logits)`` of the GNN and of the ``baseline`` model (``baseline.models``'
    name) trained as the train and baseline stages train them, with ``params.seed`` = ``seed``;
    ``args`` are the evaluate stage's (its inputs are train's); ``graph`` with the features as
    the models read them (``read_model_typed``) and the split's target ``roles`` (int8 role
    codes (N_target,)) are read once by the caller for every seed."""
    from gnnpipe.commands import train as train_command

    reseeded = replace(params, seed=seed)
    scratch = Path(tempfile.mkdtemp(prefix=f"seed-{seed}-"))  # inside the run scratch
    train_args = _train_args(args, scratch)
    device = devices.resolve(params.train.device, SINGLE)
    train_command.train_nodes(train_args, reseeded, SINGLE, device)
    gnn = io.read_predictions(staged(train_args.out))  # staged: published at the stage's end

    fitted = FIT_NODES[baseline](graph.x[graph.target], graph, roles, reseeded)
    return gnn, (fitted.node_id, fitted.logits)


def _train_args(args, scratch: Path) -> argparse.Namespace:
    """The train command's arguments: its inputs are evaluate's own, its outputs go to
    ``scratch`` (gnnpipe/pipeline.py lists both)."""
    paths = {}
    for artifact in STAGES["train"].paths:
        if artifact.option is None:
            continue
        name = artifact.option.removeprefix("--").replace("-", "_")
        paths[name] = getattr(args, name) if artifact.kind == "in" else scratch / artifact.path
    return argparse.Namespace(stage="train", params=args.params, resources=None, **paths)

