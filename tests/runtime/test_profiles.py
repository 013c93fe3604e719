"""Parameter profiles (profiles/*.yaml) turned into `dvc exp run -S` arguments."""

from pathlib import Path

import pytest
import yaml

from gnnpipe.config import params_from_dict
from gnnpipe.runtime.profiles import _merge, main, set_args

REPO = Path(__file__).resolve().parents[2]


def _apply(args: list[str], params: dict) -> dict:
    """What `dvc exp run` does with the -S pairs: YAML-parse each value and set the key."""
    assert args[::2] == ["-S"] * (len(args) // 2)
    for pair in args[1::2]:
        key, value = pair.split("=", 1)
        assert " " not in pair  # one shell word each
        node = params
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return params


def test_scale_profile_is_valid_and_round_trips_through_the_set_args():
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    profile = yaml.safe_load((REPO / "profiles/scale.yaml").read_text())
    args = set_args(REPO / "profiles/scale.yaml", REPO / "params.yaml")
    applied = _apply(args, yaml.safe_load((REPO / "params.yaml").read_text()))
    assert applied == _merge(base, profile)
    scale = params_from_dict(applied)
    assert scale.dataset.synthetic.num_nodes == 1_000_000
    assert scale.train.sampler == "neighbor" and scale.train.neighbor.num_neighbors == (10, 5)


def test_typed_scale_profile_is_valid_and_sized_as_documented():
    """profiles/typed_scale.yaml: >= 1M target nodes, >= 2M nodes in all, mini-batch training."""
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    profile = yaml.safe_load((REPO / "profiles/typed_scale.yaml").read_text())
    args = set_args(REPO / "profiles/typed_scale.yaml", REPO / "params.yaml")
    applied = _apply(args, yaml.safe_load((REPO / "params.yaml").read_text()))
    assert applied == _merge(base, profile)
    typed = params_from_dict(applied)
    syn = typed.dataset.synthetic
    assert typed.dataset.layout == "typed" and syn.num_nodes >= 1_000_000
    assert syn.num_nodes + syn.num_authors + syn.num_venues >= 2_000_000
    assert typed.train.sampler == "neighbor"


def test_strings_that_yaml_would_misread_are_quoted(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump({"dataset": {"name": "on", "nodes": {"file": "a b.parquet"}},
                                       "train": {"model": "gat"}}))
    args = set_args(profile, REPO / "params.yaml")
    assert "train.model=gat" in args and 'dataset.name="on"' in args
    applied = _apply([a.replace("a b", "a_b") for a in args], {})
    assert applied["dataset"]["name"] == "on"


@pytest.mark.parametrize("text, message", [
    ("train: {sampler: nope}", r"train\.sampler='nope' is not valid; expected one of"),
    ("trian: {epochs: 3}", r"trian"),
    ("- a\n- b", r"must be a mapping"),
])
def test_bad_profiles_fail_with_the_key_named(tmp_path, capsys, text, message):
    profile = tmp_path / "bad.yaml"
    profile.write_text(text)
    with pytest.raises(ValueError, match=message):
        set_args(profile, REPO / "params.yaml")
    assert main([str(profile), "--params", str(REPO / "params.yaml")]) == 1
    assert "Traceback" not in capsys.readouterr().err
