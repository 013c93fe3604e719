"""The layering of gnnpipe, read from the source with ``ast`` (nothing is imported).

- no import cycles among gnnpipe modules (function-level imports count);
- ``gnnpipe/io`` (the filesystem layer) imports no domain module;
- the variant of a run is decided only where a stage starts (``gnnpipe/commands``);
- dvc.yaml is what ``python -m gnnpipe.dvc_yaml --write`` makes of the stage table, and each
  stage's deps cover the import closure of its script, so a changed module always re-runs the
  stages that reach it (a stale cache is a wrong result).
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
import yaml

from gnnpipe import dvc_yaml
from gnnpipe.pipeline import STAGES

ROOT = Path(__file__).resolve().parents[2]

# What io may import besides itself: the plain data types it stores, which import nothing of
# gnnpipe but each other
IO_ALLOWED = {"gnnpipe", "gnnpipe.data.graph", "gnnpipe.data.edges"}

MODULES = dvc_yaml.module_files()
GRAPH = dvc_yaml.import_graph()  # what a module can run, subprocesses and importlib included
STATIC = dvc_yaml.import_graph(dynamic=False)  # its import statements: the layering


def cycles() -> set[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in STATIC[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for module in sorted(STATIC):
        if module not in index:
            visit(module)
    return found


def test_import_graph_sees_function_level_and_relative_imports():
    assert "gnnpipe.training.lightning" in GRAPH["gnnpipe.training.node_fit"]  # in fit_nodes
    train = GRAPH["gnnpipe.commands.train"]
    assert "gnnpipe.commands.variant" in train
    assert "gnnpipe.training.distributed" in train  # from gnnpipe.training import distributed


def test_import_graph_sees_modules_reached_without_an_import_statement():
    # importlib.import_module(f"gnnpipe.sources.{...}"): every reader dataset.source may pick
    assert {"gnnpipe.sources.ogb", "gnnpipe.sources.tables"} <= GRAPH["gnnpipe.sources"]
    assert "gnnpipe.graphops.propagate_kernel" in GRAPH["gnnpipe.graphops.propagate"]  # import_module("...")
    # torchrun's agent and the ranks it starts: [..., "-m", "gnnpipe.training.torchrun"], "-m",
    # "gnnpipe"
    assert {"gnnpipe.training.torchrun", "gnnpipe.__main__"} <= GRAPH["gnnpipe.training.distributed"]
    assert not {"gnnpipe.training.torchrun", "gnnpipe.__main__"} & STATIC["gnnpipe.training.distributed"]


def test_import_graph_is_parsed_again_when_a_file_changes(tmp_path):
    package = tmp_path / "gnnpipe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "b.py").write_text("")
    (package / "a.py").write_text("x = 1\n")
    assert dvc_yaml.import_graph(tmp_path)["gnnpipe.a"] == set()
    (package / "a.py").write_text("import gnnpipe.b\n")  # cached graphs are keyed by stat
    assert dvc_yaml.import_graph(tmp_path)["gnnpipe.a"] == {"gnnpipe.b"}


def test_a_stage_reaches_its_own_command_alone():
    """cli imports ``gnnpipe.commands.<stage>`` by name: a stage's closure holds its own."""
    assert {m for m in GRAPH["gnnpipe.cli"] if m.startswith("gnnpipe.commands.")} >= {
        f"gnnpipe.commands.{stage}" for stage in STAGES}
    reached = dvc_yaml.stage_closure("prepare", GRAPH)
    assert "gnnpipe.commands.prepare" in reached
    assert not {f"gnnpipe.commands.{s}" for s in STAGES if s != "prepare"} & set(reached)


def test_no_import_cycles():
    assert not cycles(), [sorted(c) for c in cycles()]


def test_io_imports_no_domain_module():
    for name in (m for m in GRAPH if m == "gnnpipe.io" or m.startswith("gnnpipe.io.")):
        bad = {m for m in GRAPH[name] if not m.startswith("gnnpipe.io")} - IO_ALLOWED
        assert not bad, f"{name} imports domain modules {sorted(bad)}"
    for name in IO_ALLOWED - {"gnnpipe"}:  # the base types stay at the bottom
        assert GRAPH[name] <= IO_ALLOWED, f"{name} imports {sorted(GRAPH[name] - IO_ALLOWED)}"


def test_variant_is_decided_only_where_a_stage_starts():
    """The layout of graph.json is read in commands/variant.py alone (and, for now,
    sampling/store.py's ``open_prepared``); ``dataset.task`` is read only by
    gnnpipe/config/rules.py, config/samplers.py's sampler rules and the commands' ``run``."""
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (isinstance(node, (ast.Attribute, ast.Name))
                    and getattr(node, "attr", getattr(node, "id", None)) == "read_description"):
                assert name in ("gnnpipe.commands.variant", "gnnpipe.sampling.store") or \
                    name.startswith("gnnpipe.io"), f"{path}:{node.lineno} asks the graph's layout"
        if name in ("gnnpipe.config.rules", "gnnpipe.config.samplers", "gnnpipe.commands.variant"):
            continue
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for node in ast.walk(func):
                if (isinstance(node, ast.Attribute) and node.attr == "task"
                        and isinstance(node.value, ast.Attribute) and node.value.attr == "dataset"):
                    assert name.startswith("gnnpipe.commands.") and func.name == "run", (
                        f"{path}:{node.lineno} reads dataset.task in {func.name}")


def _stages() -> dict[str, dict]:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def test_dvc_yaml_is_generated_from_the_stage_table(capsys):
    assert dvc_yaml.main(["--check"]) == 0, capsys.readouterr().err
    assert list(_stages()) == list(STAGES)


@pytest.mark.parametrize("edit, names", [
    (("      - gnnpipe/training\n", ""), "baseline deps +gnnpipe/training"),
    (("      - data/pairs\n", "      - data/pairs\n      - gnnpipe/nothing.py\n"),
     "predict deps -gnnpipe/nothing.py"),
    (("      - metrics/perf/train.json  #", "      - metrics/perf/train.json:\n"
      "          persist: true\n      - metrics/perf/unused.json  #"), "train outs"),
    (("  # wall time, peak RSS", "  # peak RSS"), "layout, order or comments only"),
    (("    type: model\n", "    type: dataset\n"), "top-level artifacts"),
])
def test_check_names_what_a_stale_dvc_yaml_lacks(tmp_path, capsys, edit, names):
    stale = tmp_path / "dvc.yaml"
    text = (ROOT / "dvc.yaml").read_text()
    assert edit[0] in text
    stale.write_text(text.replace(edit[0], edit[1], 1))
    assert dvc_yaml.main(["--check", "--file", str(stale)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and names in err and "gnnpipe.dvc_yaml --write" in err
    assert dvc_yaml.main(["--write", "--file", str(stale)]) == 0
    assert dvc_yaml.main(["--check", "--file", str(stale)]) == 0


def test_the_model_artifact_is_the_train_stage_cached_model_file():
    """`dvc artifacts get` fetches an artifact through the out that tracks it: a path outside
    every cached out is refused at generation."""
    assert dvc_yaml.artifact_out("gnn-model", "data/model/model.pt") == ("train", "data/model")
    entry = yaml.safe_load((ROOT / "dvc.yaml").read_text())["artifacts"]["gnn-model"]
    assert entry["path"] == "data/model/model.pt" and entry["type"] == "model"
    with pytest.raises(ValueError, match="artifact x: metrics/train.json is in no stage's cached"):
        dvc_yaml.artifact_out("x", "metrics/train.json")  # a record: in git, not in the cache
    with pytest.raises(ValueError, match="data/modelx"):
        dvc_yaml.artifact_out("x", "data/modelx/model.pt")


def _covered(path: Path, deps: list[Path]) -> bool:
    return any(path == dep or dep in path.parents for dep in deps)


@pytest.mark.parametrize("stage", list(STAGES))
def test_dvc_deps_cover_the_stage_import_closure(stage):
    deps = [ROOT / d for d in _stages()[stage]["deps"] if "${" not in d]
    # a code dep that does not exist protects nothing (data deps are upstream outputs)
    missing = [d for d in deps if d.parts[len(ROOT.parts)] in ("gnnpipe", "stages")
               and not d.exists()]
    assert ROOT / "stages" / f"{stage}.py" in deps, f"dvc.yaml {stage}: its script is no dep"
    assert not missing, f"dvc.yaml {stage}: deps that do not exist: {missing}"
    uncovered = {m: chain for m, chain in dvc_yaml.stage_closure(stage, GRAPH).items()
                 if not _covered(MODULES[m], deps)}
    assert not uncovered, f"dvc.yaml {stage} deps miss: " + "; ".join(
        f"{MODULES[m].relative_to(ROOT)} (via {' -> '.join(chain)})"
        for m, chain in sorted(uncovered.items()))


def test_per_file_entries_name_packages():
    """A PER_FILE entry that is no package (moved or renamed) would silently make it a folder."""
    for package in dvc_yaml.PER_FILE:
        assert MODULES[package].name == "__init__.py", package


def test_a_package_is_one_folder_dep_and_the_commands_are_files():
    """dvc.lock stays small (docs/pipeline.md): a reached subpackage is its folder, and a
    stage lists its own command module, not the others'."""
    deps = set(dvc_yaml.code_deps("train", GRAPH))
    assert {"gnnpipe/training", "gnnpipe/io", "gnnpipe/commands/train.py"} <= deps
    assert not any(d.startswith(("gnnpipe/training/", "gnnpipe/io/")) for d in deps)
    assert "gnnpipe/commands" not in deps and "gnnpipe/commands/predict.py" not in deps
    fine = dvc_yaml.code_deps("train", GRAPH, per_file=tuple(
        m for m in MODULES if MODULES[m].name == "__init__.py"))
    assert "gnnpipe/training/models.py" in fine and len(fine) > len(deps)


def test_each_input_is_an_earlier_stage_output_or_committed():
    """The table's inputs are upstream outputs (or lie under one), or files in the repository."""
    written: list[str] = []
    for name, stage in STAGES.items():
        for artifact in (a for a in stage.paths if a.kind == "in"):
            for path in artifact.dvc_paths:
                upstream = any(path == o or path.startswith(o + "/") for o in written)
                assert upstream or path.startswith("${") or (ROOT / path).exists(), (
                    f"gnnpipe/pipeline.py {name}: {artifact.option} {path} is nobody's output")
        written += [a.path for a in stage.paths if a.kind not in ("in", "local")]


def test_cli_imports_command_modules_only_through_the_stage_table():
    """The closure above assumes cli reaches commands by name; a static import of one command
    would drag it into every stage."""
    assert not {m for m in STATIC["gnnpipe.cli"] if m.startswith("gnnpipe.commands.")}


def _entries(section: list) -> list[tuple[str, dict]]:
    return [(e, {}) if isinstance(e, str) else next(iter(e.items())) for e in section]


def test_wall_clock_and_byte_figures_are_no_dvc_metrics_and_not_in_git():
    """`dvc exp show` lists every metrics file's keys, and a git-tracked timing file changes
    with every run: perf files are cached outs (and plots), which DVC keeps out of git."""
    perf = 0
    for name, stage in _stages().items():
        for path, opts in _entries(stage.get("metrics", [])):
            assert not path.startswith("metrics/perf/"), f"dvc.yaml {name}: metric {path}"
        for path, opts in _entries(stage.get("outs", []) + stage.get("plots", [])):
            if path.startswith("metrics/perf/"):
                perf += 1
                assert opts.get("cache", True) is True, f"dvc.yaml {name}: {path} must be cached"
        assert f"metrics/perf/stages/{name}.json" in stage["cmd"], name
    assert perf >= len(_stages())
    tracked = subprocess.run(["git", "ls-files", "metrics/perf"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    assert tracked == [], f"git tracks wall-clock files: {tracked}"


def test_depth_sweep_scratch_copy_holds_every_input_dvc_yaml_needs():
    """bench/depth_sweep.py runs the pipeline in a copy: every dep no stage writes must be in it."""
    from bench.depth_sweep import COPIED

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    stages = _stages()
    outs = {(next(iter(o)) if isinstance(o, dict) else o) for s in stages.values()
            for key in ("outs", "metrics", "plots") for o in s.get(key, [])}
    for name, stage in stages.items():
        for dep in stage["deps"]:
            dep = dep.replace("${dataset.path}", params["dataset"]["path"])
            if any(dep == o or dep.startswith(o.rstrip("/") + "/") for o in outs):
                continue
            assert any(dep == c or dep.startswith(c + "/") for c in COPIED), (
                f"dvc.yaml {name}: dep {dep} is not in bench/depth_sweep.py COPIED")
