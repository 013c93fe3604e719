"""The layering of gnnpipe, read from the source with ``ast`` (nothing is imported).

- no import cycles among gnnpipe modules (function-level imports count);
- ``gnnpipe/io`` (the filesystem layer) imports no domain module;
- the variant of a run is decided only where a stage starts (``gnnpipe/commands``);
- each dvc.yaml stage's deps cover the import closure of its script, so a changed module
  always re-runs the stages that reach it (a stale cache is a wrong result).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gnnpipe"

# What io may import besides itself: the plain data types it stores, which import nothing of
# gnnpipe but each other
IO_ALLOWED = {"gnnpipe", "gnnpipe.graph", "gnnpipe.typed_graph", "gnnpipe.part_shard"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The gnnpipe module ``name`` stands for (a submodule, or the package it names a
    member of), or None outside gnnpipe."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(path: Path) -> set[str]:
    """gnnpipe modules ``path`` imports anywhere in its body (function level too)."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from gnnpipe.io import hetero` imports the submodule, `... import read_json` the
            # package: both resolve to the longest gnnpipe module the dotted name reaches
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        found.update(m for m in map(_resolve, names) if m and m != here)
    return found


GRAPH = {name: imports_of(path) for name, path in MODULES.items()}


def _with_parents(name: str) -> set[str]:
    """Importing a.b.c runs a/__init__.py and a/b/__init__.py first."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(MODULES)


def closure(start: set[str]) -> dict[str, list[str]]:
    """Every module reachable from ``start`` -> one import chain that reaches it."""
    chains = {m: [m] for s in start for m in _with_parents(s)}
    todo = list(chains)
    while todo:
        current = todo.pop()
        for nxt in sorted(GRAPH.get(current, ())):
            for module in sorted(_with_parents(nxt)):
                if module not in chains:
                    chains[module] = chains[current] + [module]
                    todo.append(module)
    return chains


def cycles() -> set[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
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

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    return found


def test_import_graph_sees_function_level_and_relative_imports():
    train = GRAPH["gnnpipe.commands.train"]
    assert "gnnpipe.models" in train  # imported inside train_nodes
    assert "gnnpipe.commands.variant" in train
    assert "gnnpipe.io.hetero" in GRAPH["gnnpipe.commands.variant"]


def test_no_import_cycles():
    assert not cycles(), [sorted(c) for c in cycles()]


def test_io_imports_no_domain_module():
    for name in (m for m in GRAPH if m == "gnnpipe.io" or m.startswith("gnnpipe.io.")):
        bad = {m for m in GRAPH[name] if not m.startswith("gnnpipe.io")} - IO_ALLOWED
        assert not bad, f"{name} imports domain modules {sorted(bad)}"
    for name in IO_ALLOWED - {"gnnpipe"}:  # the base types stay at the bottom
        assert GRAPH[name] <= IO_ALLOWED, f"{name} imports {sorted(GRAPH[name] - IO_ALLOWED)}"


def test_variant_is_decided_only_where_a_stage_starts():
    """``is_hetero`` is asked in commands/variant.py alone; ``dataset.task`` is read only by
    gnnpipe/config/rules.py, sampling/table.py's sampler rules and the commands' ``run``."""
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("is_hetero", "is_hetero_split"):
                assert name == "gnnpipe.commands.variant", f"{path}:{node.lineno} asks is_hetero"
        if name in ("gnnpipe.config.rules", "gnnpipe.sampling.table", "gnnpipe.commands.variant"):
            continue
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for node in ast.walk(func):
                if (isinstance(node, ast.Attribute) and node.attr == "task"
                        and isinstance(node.value, ast.Attribute) and node.value.attr == "dataset"):
                    assert name.startswith("gnnpipe.commands.") and func.name == "run", (
                        f"{path}:{node.lineno} reads dataset.task in {func.name}")


def _stages() -> dict[str, dict]:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def _stage_roots(stage: str) -> set[str]:
    """What a stage script runs: gnnpipe.cli builds only the named stage's subcommand, so the
    stage reaches its own command module (not the other stages' through cli's importlib)."""
    script = ROOT / "stages" / f"{stage}.py"
    tree = ast.parse(script.read_text())
    assert any(isinstance(n, ast.Constant) and n.value == stage for n in ast.walk(tree)), script
    return {"gnnpipe.cli", f"gnnpipe.commands.{stage}"}


def _covered(path: Path, deps: list[Path]) -> bool:
    return any(path == dep or dep in path.parents for dep in deps)


@pytest.mark.parametrize("stage", list(_stages()))
def test_dvc_deps_cover_the_stage_import_closure(stage):
    deps = [ROOT / d for d in _stages()[stage]["deps"] if "${" not in d]
    # a code dep that does not exist protects nothing (data deps are upstream outputs)
    missing = [d for d in deps if d.parts[len(ROOT.parts)] in ("gnnpipe", "stages")
               and not d.exists()]
    assert ROOT / "stages" / f"{stage}.py" in deps, f"dvc.yaml {stage}: its script is no dep"
    assert not missing, f"dvc.yaml {stage}: deps that do not exist: {missing}"
    uncovered = {m: chain for m, chain in closure(_stage_roots(stage)).items()
                 if not _covered(MODULES[m], deps)}
    assert not uncovered, f"dvc.yaml {stage} deps miss: " + "; ".join(
        f"{MODULES[m].relative_to(ROOT)} (via {' -> '.join(chain)})"
        for m, chain in sorted(uncovered.items()))


def test_cli_imports_command_modules_only_through_the_stage_table():
    """The closure above assumes cli reaches commands dynamically; a static import of one
    command would drag it into every stage."""
    assert not {m for m in GRAPH["gnnpipe.cli"] if m.startswith("gnnpipe.commands.")}


def _entries(section: list) -> list[tuple[str, dict]]:
    return [(e, {}) if isinstance(e, str) else next(iter(e.items())) for e in section]


def test_wall_clock_and_byte_figures_are_no_dvc_metrics():
    """`dvc exp show` lists every metrics file's keys: perf files stay uncached outs instead."""
    perf = 0
    for name, stage in _stages().items():
        for path, opts in _entries(stage.get("metrics", [])):
            assert not path.startswith("metrics/perf/"), f"dvc.yaml {name}: metric {path}"
        for path, opts in _entries(stage.get("outs", [])):
            if path.startswith("metrics/perf/"):
                perf += 1
                assert opts.get("cache") is False, f"dvc.yaml {name}: {path} must not be cached"
        assert f"metrics/perf/stages/{name}.json" in stage["cmd"], name
    assert perf >= len(_stages())


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
