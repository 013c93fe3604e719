"""params.yaml validation: defaults, unknown keys, bad values and types, ranges, file errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gnnpipe.config import (BaselineParams, Params, ParamsError, TrainParams, load_params,
                            params_from_dict, to_dict)

REPO = Path(__file__).resolve().parents[1]


def _write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------------- defaults
def test_repo_params_yaml_equals_dataclass_defaults():
    loaded = load_params(REPO / "params.yaml")
    assert to_dict(loaded) == to_dict(Params())


def test_repo_params_yaml_sets_every_key_explicitly():
    """So the equality above really compares the file against every default."""
    import yaml

    raw = yaml.safe_load((REPO / "params.yaml").read_text())

    def keys(tree, prefix=""):
        out = set()
        for name, value in tree.items():
            key = f"{prefix}{name}"
            out |= keys(value, key + ".") if isinstance(value, dict) else {key}
        return out

    assert keys(raw) == keys(to_dict(Params()))


def test_empty_mapping_and_empty_file_give_defaults(tmp_path):
    assert params_from_dict({}) == Params()
    assert load_params(_write_yaml(tmp_path, "")) == Params()
    # a section given as null also takes its defaults
    assert params_from_dict({"train": None}).train == TrainParams()


def test_partial_section_keeps_other_defaults():
    params = params_from_dict({"train": {"hidden": 128}})
    assert params.train.hidden == 128
    assert params.train.lr == TrainParams().lr
    assert params.baseline == BaselineParams()


# ------------------------------------------------------------------------------- unknown keys
def test_unknown_top_level_key_names_key_and_allowed_keys():
    with pytest.raises(ParamsError, match=r"unknown key sed; allowed keys in the top level: "
                                          r"seed, dataset, split, analyze, partition, propagate, train, "
                                          r"baseline, evaluate"):
        params_from_dict({"sed": 1})


def test_unknown_nested_key_names_dotted_key():
    with pytest.raises(ParamsError, match=r"unknown key train\.lrr; allowed keys in train: .*\blr\b"):
        params_from_dict({"train": {"lrr": 0.1}})


def test_unknown_doubly_nested_key_names_dotted_key_and_allowed_keys():
    with pytest.raises(ParamsError) as err:
        params_from_dict({"dataset": {"synthetic": {"nodes": 10}}})
    message = str(err.value)
    assert "unknown key dataset.synthetic.nodes" in message
    assert "allowed keys in dataset.synthetic:" in message
    for allowed in ("num_nodes", "num_classes", "homophily", "degree_skew", "class_imbalance"):
        assert allowed in message


def test_unknown_key_in_file_names_the_file(tmp_path):
    path = _write_yaml(tmp_path, "train:\n  lrr: 0.1\n")
    with pytest.raises(ParamsError, match=re.escape(f"{path}: unknown key train.lrr")):
        load_params(path)


# ------------------------------------------------------------------------------ bad values
def test_bad_literal_names_allowed_values():
    with pytest.raises(ParamsError, match=r"train\.model='gatt' is not valid; expected one of: "
                                          r"mlp, gcn, sage, gat, sign"):
        params_from_dict({"train": {"model": "gatt"}})


def test_bool_is_not_a_literal_value():
    with pytest.raises(ParamsError, match=r"dataset\.self_loops=True"):
        params_from_dict({"dataset": {"self_loops": True}})


@pytest.mark.parametrize("raw, message", [
    ({"train": {"hidden": True}}, r"train\.hidden=True is not valid; expected int"),
    ({"train": {"hidden": "64"}}, r"train\.hidden='64' is not valid; expected int"),
    ({"train": {"hidden": 64.5}}, r"train\.hidden=64\.5 is not valid; expected int"),
    ({"seed": False}, r"seed=False is not valid; expected int"),
    ({"train": {"lr": True}}, r"train\.lr=True is not valid; expected float"),
    ({"train": {"lr": "fast"}}, r"train\.lr='fast' is not valid; expected float"),
    ({"dataset": {"undirected": "yes"}}, r"dataset\.undirected='yes' is not valid; expected bool"),
    ({"dataset": {"undirected": 1}}, r"dataset\.undirected=1 is not valid; expected bool"),
    ({"split": {"node": {"train": "half"}}},
     r"split\.node\.train='half' is not valid; expected int or float"),
])
def test_wrong_scalar_types_are_rejected(raw, message):
    with pytest.raises(ParamsError, match=message):
        params_from_dict(raw)


@pytest.mark.parametrize("raw, message", [
    ({"train": [1, 2]}, r"train must be a mapping of keys, got \[1, 2\]"),
    ({"dataset": {"synthetic": 5}}, r"dataset\.synthetic must be a mapping of keys, got 5"),
])
def test_list_or_scalar_for_a_section_is_rejected(raw, message):
    with pytest.raises(ParamsError, match=message):
        params_from_dict(raw)


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(ParamsError, match="must hold a mapping of sections, got list"):
        params_from_dict([1, 2])
    path = _write_yaml(tmp_path, "- a\n- b\n")
    with pytest.raises(ParamsError, match="must hold a mapping of sections"):
        load_params(path)


@pytest.mark.parametrize("raw, message", [
    ({"train": {"dropout": 1.0}}, r"train\.dropout=1\.0 is out of range; expected < 1\.0"),
    ({"train": {"dropout": -0.1}}, r"train\.dropout=-0\.1 is out of range; expected >= 0\.0"),
    ({"baseline": {"dropout": 1.0}}, r"baseline\.dropout=1\.0 is out of range; expected < 1\.0"),
    ({"dataset": {"synthetic": {"homophily": 1.5}}},
     r"dataset\.synthetic\.homophily=1\.5 is out of range; expected <= 1\.0"),
    ({"partition": {"num_parts": 0}}, r"partition\.num_parts=0 is out of range; expected >= 1"),
    ({"train": {"lr": 0}}, r"train\.lr=0\.0 is out of range; expected > 0\.0"),
    ({"dataset": {"synthetic": {"num_nodes": 1}}},
     r"dataset\.synthetic\.num_nodes=1 is out of range; expected >= 2"),
    ({"split": {"node": {"val": 0.0}}}, r"split\.node\.val=0\.0 is out of range; expected > 0\.0"),
    ({"seed": -1}, r"seed=-1 is out of range; expected >= 0"),
])
def test_range_violations_name_key_and_bound(raw, message):
    with pytest.raises(ParamsError, match=message):
        params_from_dict(raw)


def test_range_bounds_are_inclusive_where_closed():
    params = params_from_dict({"train": {"dropout": 0.0},
                               "dataset": {"synthetic": {"homophily": 1.0}},
                               "partition": {"num_parts": 1}})
    assert params.train.dropout == 0.0
    assert params.dataset.synthetic.homophily == 1.0
    assert params.partition.num_parts == 1


# ---------------------------------------------------------------------------------- coercion
def test_string_scientific_float_accepted_for_weight_decay(tmp_path):
    # PyYAML (YAML 1.1) reads 5e-4 without a dot as a string
    path = _write_yaml(tmp_path, "train:\n  weight_decay: 5e-4\n")
    params = load_params(path)
    assert isinstance(params.train.weight_decay, float)
    assert params.train.weight_decay == pytest.approx(5e-4)
    assert params_from_dict({"baseline": {"weight_decay": "5e-4"}}).baseline.weight_decay == 5e-4


def test_int_given_for_float_becomes_float():
    params = params_from_dict({"train": {"lr": 1}})
    assert type(params.train.lr) is float and params.train.lr == 1.0


def test_integral_float_accepted_as_int_count():
    params = params_from_dict({"dataset": {"synthetic": {"num_nodes": 1e3}}})
    assert type(params.dataset.synthetic.num_nodes) is int
    assert params.dataset.synthetic.num_nodes == 1000


def test_split_sizes_keep_int_or_float():
    counted = params_from_dict({"split": {"node": {"train": 20, "val": 0.5, "test": 0.25}}})
    assert type(counted.split.node.train) is int and counted.split.node.train == 20
    assert type(counted.split.node.val) is float and counted.split.node.val == 0.5
    assert type(counted.split.node.test) is float


# ------------------------------------------------------------------------------ cross checks
def test_sign_model_requires_sign_sampler():
    with pytest.raises(ParamsError, match=r"train\.model='sign' with train\.sampler='full'"):
        params_from_dict({"train": {"model": "sign"}})
    with pytest.raises(ParamsError, match=r"train\.model='sage' with train\.sampler='sign'"):
        params_from_dict({"train": {"sampler": "sign"}})
    ok = params_from_dict({"train": {"model": "sign", "sampler": "sign"}})
    assert (ok.train.model, ok.train.sampler) == ("sign", "sign")


def test_sign_mismatch_in_file_raises(tmp_path):
    path = _write_yaml(tmp_path, "train:\n  model: sign\n  sampler: full\n")
    with pytest.raises(ParamsError, match="train.sampler=sign"):
        load_params(path)


# ------------------------------------------------------------------------------ file errors
def test_missing_file_names_the_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ParamsError, match=re.escape(f"file {path} not found")):
        load_params(path)


def test_invalid_yaml_names_the_file(tmp_path):
    path = _write_yaml(tmp_path, "train:\n  lr: [0.1\n  hidden: 3\n")
    with pytest.raises(ParamsError, match=re.escape(f"{path} is not valid YAML")) as err:
        load_params(path)
    assert "\n" not in str(err.value)  # one line, for a CLI error


def test_errors_are_value_errors():
    with pytest.raises(ValueError):
        params_from_dict({"train": {"model": "gatt"}})


@pytest.mark.parametrize("raw", [
    {"train": {"dropout": float("nan")}},
    {"train": {"lr": "nan"}},
    {"dataset": {"synthetic": {"homophily": float("nan")}}},
])
def test_nan_is_out_of_every_range(raw):
    with pytest.raises(ParamsError, match="is not a finite number"):
        params_from_dict(raw)
