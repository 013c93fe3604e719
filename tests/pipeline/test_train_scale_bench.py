"""bench/train_scale.py: what it calls each process of a stage's tree, the epoch figures it reads
from the perf history, the params it sets and its table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

# bench/ is a folder of the repository, not part of the installed package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import train_scale  # noqa: E402


def test_processes_are_named_by_their_command_line():
    label = train_scale.label
    assert label("python -m torch.distributed.run --nproc-per-node 2 stages/train.py") == "torchrun"
    assert label("/venv/bin/torchrun --nnodes 1 stages/train.py") == "torchrun"
    assert label("python -c from multiprocessing.spawn import spawn_main; spawn_main()") == \
        "dask-worker"
    assert label("python -c from multiprocessing.resource_tracker import main") == "mp-helper"
    assert label("python stages/train.py --resources x.json") == "rank"


def test_epoch_figures_are_the_first_epochs_seconds_per_seed(tmp_path):
    perf = tmp_path / "metrics" / "perf"
    (perf / "stages").mkdir(parents=True)
    (perf / "train_history.csv").write_text(
        "epoch,train_seconds,eval_seconds,batches,seeds,seeds_per_s,batches_per_s\n"
        "1,2.5,1.0,10,10000,4000.0,4.0\n2,9.0,1.0,10,10000,1111.1,1.1\n")
    (perf / "stages" / "train.json").write_text(json.dumps({"seconds": 7.25}))
    got = train_scale.epoch_figures(tmp_path)
    assert got == {"epoch_s": 2.5, "seeds": 10000, "us_per_seed": 250.0, "stage_own_s": 7.25}
    assert train_scale.epoch_figures(tmp_path / "none") == {}


def test_params_are_set_key_by_key_and_rows_become_a_table(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(
        {"train": {"epochs": 1, "dist": {"nproc": 1, "nnodes": 1}}, "seed": 3}))
    train_scale.set_params(tmp_path, {"train": {"dist": {"nproc": 2}}})
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    assert params == {"train": {"epochs": 1, "dist": {"nproc": 2, "nnodes": 1}}, "seed": 3}
    row = {"size": "10M", "stage": "train", "ranks": 2, "wall_s": 13.1, "exit_code": 0,
           "us_per_seed": 73.56, "epoch_s": 3.68, "stage_anon_mb": 157.3, "stage_hwm_mb": 266.4,
           "children_anon_mb": [511.8, 485.2], "children": ["rank", "rank"], "load": 0.5}
    failed = dict(row, stage="predict", exit_code=1, children_anon_mb=[], children=[])
    del failed["us_per_seed"]
    lines = train_scale.markdown([row, failed]).splitlines()
    assert lines[2] == ("| 10M | train | 2 | 13.1 | 73.56 (3.7) | 157 (266) | rank 512, rank 485 "
                        "| 0.5 |")
    assert lines[3] == "| 10M | predict **exit 1** | 2 | 13.1 | - | 157 (266) | - | 0.5 |"
