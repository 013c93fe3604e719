"""DVC's own cost per command: the YAML parser it reads dvc.yaml, dvc.lock and params.yaml with
(docs/pipeline.md, "What a run costs besides the stages")."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dvc_reads_its_files_with_ruamels_c_parser():
    # without ruamel.yaml.clib (a declared dependency) DVC silently parses in pure Python:
    # ~1 s more CPU per no-op dvc repro on the default pipeline (bench/dvc_layout.py)
    import _ruamel_yaml
    from dvc.utils.serialize._yaml import parse_yaml
    from ruamel.yaml import YAML

    assert YAML(typ="safe").Parser is _ruamel_yaml.CParser
    lock = parse_yaml((ROOT / "dvc.lock").read_text(), "dvc.lock")
    assert set(lock["stages"]) >= {"prepare", "train", "report"}


def test_the_c_parser_is_a_declared_dependency():
    text = (ROOT / "pyproject.toml").read_text()
    dependencies = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert '"ruamel.yaml.clib' in dependencies
