"""params threads: the auto rule (affinity, cgroup quota, DDP ranks), validation, and the value
recorded in the perf files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from gnnpipe.runtime import threads
from gnnpipe.cli import main
from gnnpipe.config import ParamsError, params_from_dict


def test_auto_divides_the_available_cores_by_the_local_ranks():
    assert threads.resolve("auto", cpus=8, ranks=1, environ={}) == 8
    assert threads.resolve("auto", cpus=8, ranks=4, environ={}) == 2
    assert threads.resolve("auto", cpus=2, ranks=4, environ={}) == 1  # never 0, never 2 x 4
    assert threads.resolve(3, cpus=8, ranks=4, environ={}) == 3  # a count is taken as given


def test_auto_follows_omp_num_threads_when_set():
    assert threads.resolve("auto", cpus=8, ranks=1, environ={"OMP_NUM_THREADS": "1"}) == 1
    assert threads.resolve("auto", cpus=8, ranks=1, environ={"OMP_NUM_THREADS": ""}) == 8


def test_torchrun_local_world_size_counts_ranks():
    assert threads.local_ranks({"LOCAL_WORLD_SIZE": "4"}) == 4
    assert threads.local_ranks({}) == 1


def test_cgroup_quota_caps_the_affinity(tmp_path, monkeypatch):
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(16)))
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n")  # 1.5 CPUs: rounded up
    assert threads.cgroup_cpus(cpu_max) == 2
    assert threads.available_cpus(cpu_max) == 2
    cpu_max.write_text("max 100000\n")
    assert threads.cgroup_cpus(cpu_max) is None
    assert threads.available_cpus(cpu_max) == 16
    assert threads.available_cpus(tmp_path / "missing") == 16


def test_idle_openmp_threads_sleep_unless_the_environment_says():
    assert threads.default_env({})["OMP_WAIT_POLICY"] == "PASSIVE"
    chosen = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert threads.default_env(chosen)["OMP_WAIT_POLICY"] == "ACTIVE"  # the user's wins


def test_large_torch_buffers_use_huge_pages_unless_the_environment_says():
    assert threads.default_env({})["THP_MEM_ALLOC_ENABLE"] == "1"
    chosen = {"THP_MEM_ALLOC_ENABLE": "0"}
    assert threads.default_env(chosen)["THP_MEM_ALLOC_ENABLE"] == "0"  # the user's wins
    assert chosen == {"THP_MEM_ALLOC_ENABLE": "0", "OMP_WAIT_POLICY": "PASSIVE"}


def test_the_wait_policy_is_set_before_the_stage_process_loads_torch():
    # OpenMP reads OMP_WAIT_POLICY once, when torch loads it, and torch's allocator
    # THP_MEM_ALLOC_ENABLE at its first allocation: record both at that import
    spy = ("import os, sys\n"
           "class Spy:\n"
           "    def find_spec(self, name, path=None, target=None):\n"
           "        if name == 'torch':\n"
           "            print('torch sees', os.environ.get('OMP_WAIT_POLICY'),\n"
           "                  os.environ.get('THP_MEM_ALLOC_ENABLE'))\n"
           "sys.meta_path.insert(0, Spy())\n"
           "import gnnpipe.cli\n"
           "print('cli imported')\n"
           "try:\n"
           "    gnnpipe.cli.main(['prepare', '--help'])\n"  # a stage's parser loads torch
           "except SystemExit:\n"
           "    pass\n"
           # 64 MiB: past glibc's largest mmap threshold, so the buffer is a mapping of its own
           "import torch\n"
           "buf = torch.empty(2**26, dtype=torch.uint8)\n"
           "at = buf.data_ptr()\n"
           "for line in open('/proc/self/smaps'):\n"
           "    if '-' in line.split()[0]:\n"
           "        lo, hi = (int(v, 16) for v in line.split()[0].split('-'))\n"
           "    elif line.startswith('VmFlags') and lo <= at < hi:\n"
           "        print('huge pages advised', 'hg' in line.split())\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "THP_MEM_ALLOC_ENABLE")}
    out = subprocess.run([sys.executable, "-c", spy], env=env, capture_output=True, text=True,
                         check=True).stdout
    # the cli alone loads no torch (gnnpipe --help starts fast); a stage's first import does
    assert out.splitlines()[:2] == ["cli imported", "torch sees PASSIVE 1"]
    if Path("/sys/kernel/mm/transparent_hugepage").exists():  # torch honours the variable
        assert out.splitlines()[-1] == "huge pages advised True"


def test_train_threads_inherit_the_global_setting_unless_set():
    params = params_from_dict({"threads": 3})
    assert threads.stage_setting(params, "train") == 3
    assert threads.stage_setting(params, "baseline") == 3
    params = params_from_dict({"threads": 3, "train": {"threads": "auto"}})
    assert threads.stage_setting(params, "train") == "auto"
    assert threads.stage_setting(params, "baseline") == 3


@pytest.mark.parametrize("raw, match", [
    ({"threads": 0}, r"threads=0 is out of range"),
    ({"threads": "many"}, r"threads='many' is not valid"),
    ({"train": {"threads": "all"}}, r"train.threads='all' is not valid"),
])
def test_bad_threads_values_are_refused(raw, match):
    with pytest.raises(ParamsError, match=match):
        params_from_dict(raw)


def test_the_pinned_count_is_recorded_in_the_perf_files(tmp_path, monkeypatch):
    params = {"threads": 1, "train": {"threads": 2, "epochs": 2, "hidden": 8},
              "baseline": {"epochs": 2, "hidden": 8},
              "dataset": {"synthetic": {"num_nodes": 300, "num_features": 8}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    before = torch.get_num_threads()
    try:
        for stage in ("prepare", "split", "train", "baseline"):
            assert main([stage, "--resources", f"metrics/perf/stages/{stage}.json"]) == 0
    finally:
        torch.set_num_threads(before)
    train = json.loads((tmp_path / "metrics/perf/stages/train.json").read_text())
    baseline = json.loads((tmp_path / "metrics/perf/stages/baseline.json").read_text())
    assert train["threads"]["threads"] == 2 and train["threads"]["setting"] == 2
    assert baseline["threads"]["threads"] == 1
    assert train["threads"]["omp_wait_policy"] == os.environ["OMP_WAIT_POLICY"]
    assert train["threads"]["thp_mem_alloc"] == os.environ["THP_MEM_ALLOC_ENABLE"]
    assert json.loads((tmp_path / "metrics/perf/train.json").read_text())["threads"] == 2
    assert json.loads((tmp_path / "metrics/perf/baseline.json").read_text())["threads"] == 1
