"""params.yaml validation: defaults, unknown keys, bad values and types, ranges, file errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gnnpipe.config import (BaselineParams, DatasetParams, Params, ParamsError, TrainParams,
                            load_params, params_from_dict, replace, to_dict)
from gnnpipe.config import rules, samplers

REPO = Path(__file__).resolve().parents[2]


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


# ---------------------------------------------------------------------- nested train section
def test_nested_train_sections_parse():
    train = params_from_dict({"train": {
        "inference": {"mode": "layerwise", "block_edges": 7},
        "neighbor": {"num_neighbors": [3, 2], "replace": True, "subgraph_type": "induced"},
        "temporal": {"strategy": "last"}, "shadow": {"depth": 3, "num_neighbors": -1},
        "hgt": {"num_samples": [8, 8]}, "cluster": {"parts_per_batch": 4},
        "saint": {"walk_length": 3, "num_steps": 5, "sample_coverage": 2},
        "dist": {"nproc": 2, "nnodes": 2, "node_rank": 1, "rdzv_endpoint": "h:1",
                 "timeout_s": 9, "shard": "none"},
        "checkpoint": {"every": 0, "resume": False}}}).train
    assert (train.inference.mode, train.inference.block_edges) == ("layerwise", 7)
    assert train.neighbor.num_neighbors == (3, 2) and train.neighbor.replace
    assert train.neighbor.subgraph_type == "induced" and not train.neighbor.disjoint
    assert (train.temporal.by, train.temporal.strategy) == ("none", "last")
    assert (train.shadow.depth, train.shadow.num_neighbors) == (3, -1)
    assert train.hgt.num_samples == (8, 8) and train.cluster.parts_per_batch == 4
    assert (train.saint.walk_length, train.saint.num_steps, train.saint.sample_coverage) == (3, 5, 2)
    assert train.dist.world_size == 4 and train.dist.timeout_s == 9.0
    assert (train.checkpoint.every, train.checkpoint.resume) == (0, False)
    assert to_dict(train)["neighbor"]["num_neighbors"] == (3, 2)


@pytest.mark.parametrize("section", ["inference", "neighbor", "temporal", "shadow", "hgt",
                                     "cluster", "saint", "dist", "checkpoint"])
def test_bad_sub_key_names_the_dotted_key_and_what_is_allowed(section):
    allowed = ", ".join(to_dict(getattr(TrainParams(), section)))
    with pytest.raises(ParamsError, match=re.escape(
            f"unknown key train.{section}.bogus; allowed keys in train.{section}: {allowed}")):
        params_from_dict({"train": {section: {"bogus": 1}}})


# Keys of the old flat train section: no longer known, refused like any unknown key
OLD_FLAT_KEYS = {"inference_block_edges": 10, "num_neighbors": [5, 5], "temporal_strategy": "last",
                 "shadow_depth": 2, "num_samples": [8, 8], "parts_per_batch": 2, "walk_length": 2,
                 "nproc": 2, "dist_timeout_s": 60.0, "checkpoint_every": 0, "resume": False}


@pytest.mark.parametrize("key", sorted(OLD_FLAT_KEYS))
def test_an_old_flat_key_is_an_unknown_key_naming_the_allowed_ones(tmp_path, key):
    allowed = ", ".join(to_dict(TrainParams()))
    message = f"unknown key train.{key}; allowed keys in train: {allowed}"
    with pytest.raises(ParamsError, match=re.escape(message)) as err:
        params_from_dict({"train": {key: OLD_FLAT_KEYS[key]}})
    assert "\n" not in str(err.value)
    # as `dvc exp run -S train.<key>=...` leaves it in params.yaml: the file named, one line
    import yaml

    path = _write_yaml(tmp_path, yaml.safe_dump({"train": {key: OLD_FLAT_KEYS[key]}}))
    with pytest.raises(ParamsError, match=re.escape(f"{path}: {message}")):
        load_params(path)


def test_an_old_scalar_for_a_sub_section_asks_for_its_mapping():
    """train.inference: auto (the old flat layout) names the section that is now a mapping."""
    with pytest.raises(ParamsError, match=r"params: train\.inference must be a mapping of keys, "
                                          r"got 'auto'"):
        params_from_dict({"train": {"inference": "auto"}})
    with pytest.raises(ParamsError, match=r"train\.temporal must be a mapping of keys, got "
                                          r"'node'"):
        params_from_dict({"train": {"temporal": "node"}})


def test_layout_alone_says_whether_the_graph_is_typed_for_every_source():
    assert DatasetParams().layout == "homogeneous"
    for source in ("synthetic", "parquet", "csv", "ogb"):  # synthetic: the built-in typed graph
        assert params_from_dict({"dataset": {"source": source, **HETERO}}).dataset.layout == "typed"
    # the former synthetic switch is gone: the loader's usual unknown-key line
    with pytest.raises(ParamsError, match=r"^params: unknown key dataset\.synthetic\.hetero; "):
        params_from_dict({"dataset": {"synthetic": {"hetero": True}}})


# ------------------------------------------------------------------------- cross-field rules
HETERO = {"layout": "typed"}
RULE_CASES = [  # (params, message, the rule that raises it: module.function)
    ({"cluster": {"memory_limit": "1MiB"}}, r"cluster.memory_limit='1MiB' must be a memory size",
     "rules._check_engine"),
    ({"cluster": {"engine": "dask", "address": "tcp://10.0.0.5:8786"}},
     r"cluster.address='tcp://10.0.0.5:8786' is plain TCP past loopback: .* cluster.tls.ca_file, "
     r"cluster.tls.cert_file and cluster.tls.key_file .* cluster.allow_insecure: true",
     "rules._check_cluster_address"),
    ({"partition": {"method": "lp", "node_weight": "degree"}},
     r"partition.method='lp' balances node counts .* \(found 'degree', 'none'\)",
     "rules._check_partition_weights"),
    ({"train": {"model": "mlp", "embeddings": {"dim": 8}}},
     r"train.embeddings.dim=8: train.model='mlp' is a features-only model", "rules._check_embeddings"),
    ({"train": {"sampler": "neighbor", "neighbor": {"weighted": True}}},
     r"train.neighbor.weighted=true .* dataset.edges.weight set \(found ''\)", "samplers._check_options"),
    ({"dataset": {"storage": {"features": "external"}, "layout": "typed"}},
     "dataset.storage.features='external' is for homogeneous graphs", "rules._check_feature_file"),
    ({"dataset": {"storage": {"features": "auto"}, "layout": "typed"}},
     "dataset.storage.features='auto' is for homogeneous graphs", "rules._check_feature_file"),
    ({"dataset": {"storage": {"feature_dtype": "float16"}, "layout": "typed"}},
     r"dataset.storage.feature_dtype='float16' is for homogeneous graphs; .* \(use float32\)",
     "rules._check_feature_file"),
    ({"train": {"model": "sign"}}, "the sign model trains on precomputed", "samplers._check_kind"),
    ({"dataset": {"source": "pyg", "layout": "typed"}},
     r"dataset.layout='typed' needs dataset.source synthetic \| parquet \| csv \| ogb .*, not 'pyg'",
     "rules._check_typed_source"),
    ({"dataset": {"source": "parquet", "layout": "typed"}, "train": {"model": "gat"}},
     "train.model='gat' is not available for heterogeneous graphs", "samplers._check_kind"),
    ({"train": {"model": "rgcn"}}, "train.model='rgcn' needs a heterogeneous graph",
     "samplers._check_kind"),
    ({"train": {"sampler": "hgt"}}, "train.sampler='hgt' samples typed node budgets",
     "samplers._check_kind"),
    ({"dataset": HETERO, "train": {"sampler": "hgt", "hgt": {"num_samples": [4]}}},
     r"train.hgt.num_samples=\[4\] has 1 hops but train.num_layers=2", "samplers._check_per_layer"),
    ({"dataset": HETERO, "train": {"model": "gat"}},
     "train.model='gat' is not available for heterogeneous graphs", "samplers._check_kind"),
    ({"dataset": HETERO, "train": {"sampler": "cluster"}},
     "train.sampler='cluster' is not available for heterogeneous graphs with dataset.task=node",
     "samplers._check_runs"),
    ({"dataset": {"task": "link", **HETERO}, "train": {"sampler": "hgt"}},
     "with dataset.task=link yet; use one of: full, link_neighbor", "samplers._check_runs"),
    ({"dataset": HETERO, "train": {"dist": {"nproc": 2}}},
     "train.dist.nproc/train.dist.nnodes > 1 on heterogeneous graphs with dataset.task=node "
     r"needs train.sampler=neighbor \(found 'full'\)", "samplers._check_ddp"),
    ({"dataset": {"task": "link", **HETERO}, "train": {"dist": {"nproc": 2}}},
     "train.dist.nproc/train.dist.nnodes > 1 on heterogeneous graphs with dataset.task=link "
     "needs train.sampler=link_neighbor", "samplers._check_ddp"),
    ({"dataset": HETERO, "train": {"compile": True}}, "train.compile / train.residual are not "
     "supported for heterogeneous", "rules._check_typed_training"),
    ({"dataset": HETERO, "train": {"residual": True, "num_layers": 3}},
     "train.compile / train.residual", "rules._check_typed_training"),
    ({"train": {"model": "gat", "hidden": 30}}, "train.hidden=30 must be divisible by "
     "train.heads=4 for gat", "rules._check_heads"),
    ({"train": {"sampler": "link_neighbor"}}, "needs dataset.task=link", "samplers._check_runs"),
    ({"dataset": {"task": "link"}, "train": {"sampler": "shadow"}},
     "for dataset.task=link use train.sampler=link_neighbor", "samplers._check_runs"),
    ({"dataset": {"task": "link"}, "train": {"sampler": "saint"}},
     "train.sampler='saint' is not available for dataset.task=link; use one of: full, sign, "
     "link_neighbor", "samplers._check_runs"),
    ({"train": {"sampler": "neighbor", "neighbor": {"num_neighbors": [5]}}},
     r"train.neighbor.num_neighbors=\[5\] has 1 hops", "samplers._check_per_layer"),
    ({"train": {"temporal": {"by": "edge"}}}, "train.temporal.by='edge' with train.sampler='full'",
     "samplers._check_options"),
    ({"train": {"dist": {"shard": "partition"}}}, "train.dist.shard='partition' with "
     "train.sampler='full'", "samplers._check_options"),
    ({"dataset": {"task": "link"}, "train": {"dist": {"nproc": 2}}},
     "train.dist.nproc/train.dist.nnodes > 1 with dataset.task=link needs "
     "train.sampler=link_neighbor \\(found 'full'\\)", "samplers._check_ddp"),
    ({"train": {"dist": {"nnodes": 2}}}, "train.dist.nnodes=2 needs train.dist.rdzv_endpoint",
     "rules._check_rendezvous"),
    ({"train": {"model": "mlp", "residual": True}}, "train.residual=true applies to gcn",
     "rules._check_residual"),
    ({"train": {"model": "sep", "hidden": 1}}, "train.hidden=1 is too narrow for "
     r"train.model=sep .* use train.hidden >= 2", "rules._check_sep"),
    ({"train": {"model": "sep", "residual": True, "num_layers": 3}}, "train.residual=true: "
     "train.model=sep has its skip connections built in; set train.residual: false",
     "rules._check_sep"),
    ({"train": {"model": "sign", "sampler": "sign", "inference": {"mode": "layerwise"}}},
     "train.inference.mode='layerwise' evaluates mlp", "rules._check_layerwise"),
    ({"dataset": HETERO, "train": {"model": "hgt", "inference": {"mode": "layerwise"}}},
     "train.inference.mode='layerwise' evaluates typed sage and rgcn models, not "
     "train.model='hgt'", "rules._check_layerwise"),
    ({"train": {"engine": "lightning", "sampler": "cluster"}},
     "train.engine='lightning' supports homogeneous", "samplers._check_lightning"),
    ({"train": {"dist": {"nnodes": 2, "node_rank": 5, "rdzv_endpoint": "h:1"}}},
     r"train.dist.node_rank=5 is out of range for train.dist.nnodes=2; expected 0 .. 1",
     "rules._check_rendezvous"),
    ({"predict": {"pairs": "pairs.csv"}}, "predict.pairs='pairs.csv' scores candidate links",
     "rules._check_pairs"),
    ({"baseline": {"models": ["mlp", "gbdt", "mlp"]}},
     r"baseline.models=\['mlp', 'gbdt', 'mlp'\] lists 'mlp' twice", "rules._check_baseline_models"),
    ({"dataset": {"task": "link"}, "baseline": {"models": ["mlp", "gbdt"]}},
     "gbdt classifies nodes .* needs dataset.task=node; with dataset.task=link use "
     r"baseline.models: \[mlp\]", "rules._check_baseline_models"),
    ({"dataset": {"task": "link"}, "evaluate": {"metric": "roc_auc"}},
     r"evaluate.metric='roc_auc' chooses the node task's metric; dataset.task=link is judged on "
     "test MRR", "rules._check_node_metric"),
    ({"dataset": {"task": "link"}, "train": {"class_weight": "balanced"}},
     r"train.class_weight='balanced' weighs node classes; dataset.task=link has none",
     "rules._check_node_metric"),
    ({"baseline": {"block_rows": 100_000}},
     "baseline.block_rows=100000 must be a multiple of 4096", "rules._check_baseline_blocks"),
    ({"dataset": {"task": "link"}, "split": {"link": {"num_hard_negatives": 0}}},
     r"evaluate.link.negatives='both' needs hard negatives from the split: set "
     r"split.link.num_hard_negatives >= 1", "rules._check_hard_negatives"),
    ({"dataset": {"task": "link"}, "evaluate": {"seeds": 3}},
     r"evaluate.seeds=3 retrains node classifiers and needs dataset.task=node \(found 'link'\)",
     "rules._check_seeds"),
    ({"train": {"dist": {"nproc": 2}}, "evaluate": {"seeds": 3}},
     r"evaluate.seeds=3 retrains the GNN on one process, but train.dist runs 2",
     "rules._check_seeds"),
    ({"split": {"node": {"mode": "time"}}}, r"split.node.mode='time' cuts message graphs .* "
     r"needs split.node.strategy=time \(found 'stratified'\)", "rules._check_split_mode"),
    ({"train": {"sampler": "cluster", "cluster": {"parts_per_batch": 9}},
      "partition": {"num_parts": 8}}, "train.cluster.parts_per_batch=9 exceeds "
     "partition.num_parts=8", "samplers._check_cluster_batch"),
    ({"train": {"sampler": "cluster", "cluster": {"keep_inter_cluster_edges": True},
                "dist": {"shard": "partition"}}},
     "train.cluster.keep_inter_cluster_edges=true needs the whole train graph",
     "samplers._check_cluster_batch"),
    ({"train": {"model": "gat", "aggregation": "csr"}},
     "train.aggregation='csr' applies to gcn and sage on homogeneous graphs, not "
     "train.model='gat'", "rules._check_aggregation"),
]


def test_list_params_that_may_be_empty_take_an_empty_list_and_mixed_values():
    """dataset.nodes.unlabeled_values: [] is allowed (no extra missing markers), ints and
    strings both parse, and a bool is refused naming the key."""
    assert params_from_dict({"dataset": {"nodes": {"unlabeled_values": []}}}
                            ).dataset.nodes.unlabeled_values == ()
    assert params_from_dict({"dataset": {"nodes": {"unlabeled_values": [-1, "unknown"]}}}
                            ).dataset.nodes.unlabeled_values == (-1, "unknown")
    with pytest.raises(ParamsError, match=r"dataset.nodes.unlabeled_values\[0\]=True"):
        params_from_dict({"dataset": {"nodes": {"unlabeled_values": [True]}}})
    with pytest.raises(ParamsError, match="train.neighbor.num_neighbors"):  # others stay non-empty
        params_from_dict({"train": {"neighbor": {"num_neighbors": []}}})


@pytest.mark.parametrize("models, message", [
    ([], r"baseline.models=\[\] is not valid; expected one of: auto or a non-empty list of one "
         "of: mlp, gbdt"),
    (["mlp", "xgboost"], r"baseline.models=\['mlp', 'xgboost'\] is not valid; expected one of: "
                         "auto or a non-empty list of one of: mlp, gbdt"),
    ("gbdt", "baseline.models='gbdt' is not valid; expected one of: auto or a non-empty list"),
])
def test_baseline_models_is_a_non_empty_list_of_known_models(models, message):
    with pytest.raises(ParamsError, match=message) as err:
        params_from_dict({"baseline": {"models": models}})
    assert "\n" not in str(err.value)


def test_baseline_models_take_either_model_or_both_and_gbdt_keys_are_checked():
    assert Params().baseline.models == "auto"  # mlp, and gbdt under baseline.auto_gbdt_cells
    both = params_from_dict({"baseline": {"models": ["gbdt", "mlp"], "gbdt": {"num_leaves": 7}}})
    assert both.baseline.models == ("gbdt", "mlp") and both.baseline.gbdt.num_leaves == 7
    with pytest.raises(ParamsError, match=r"baseline.gbdt.feature_fraction=0.0 is out of range"):
        params_from_dict({"baseline": {"gbdt": {"feature_fraction": 0.0}}})
    with pytest.raises(ParamsError, match="unknown key baseline.gbdt.max_depth; allowed keys in "
                                          "baseline.gbdt: num_leaves"):
        params_from_dict({"baseline": {"gbdt": {"max_depth": 3}}})
    with pytest.raises(ParamsError, match="unknown key train.models"):  # the GNN has no list
        params_from_dict({"train": {"models": ["mlp"]}})


def test_replacing_inside_params_runs_the_rules_again():
    assert replace(Params(), train={"epochs": 3}).train.epochs == 3
    with pytest.raises(ParamsError, match="use train.model=sign together with train.sampler=sign"):
        replace(Params(), train={"model": "sign"})


RULE_MODULES = {"rules": rules, "samplers": samplers}  # in the order loading runs them


@pytest.mark.parametrize("raw, message, rule", RULE_CASES)
def test_each_cross_field_rule_fires_once_at_load_time(raw, message, rule, monkeypatch):
    with pytest.raises(ParamsError, match=message) as err:
        params_from_dict(raw)
    assert "\n" not in str(err.value)
    calls = []
    for prefix, module in RULE_MODULES.items():
        monkeypatch.setattr(module, "RULES", tuple(
            (lambda p, r=r, name=f"{prefix}.{r.__name__}": (calls.append(name), r(p)))
            for r in module.RULES))
    with pytest.raises(ParamsError, match=message):
        params_from_dict(raw)
    assert calls[-1] == rule and calls.count(rule) == 1  # the last rule run raised, once


def test_every_rule_is_in_its_modules_one_list_and_covered():
    defined = set()
    for prefix, module in RULE_MODULES.items():
        names = {name for name in dir(module) if name.startswith("_check_")}
        assert names == {r.__name__ for r in module.RULES}, prefix
        defined |= {f"{prefix}.{name}" for name in names}
    assert {case[2] for case in RULE_CASES} == defined


def test_typed_graphs_accept_what_the_typed_train_stage_runs():
    """neighbor / link_neighbor on one or several ranks, AMP, layer-wise sage and rgcn."""
    for task, sampler in (("node", "neighbor"), ("link", "link_neighbor")):
        params = params_from_dict({"dataset": {"task": task, **HETERO}, "train": {
            "sampler": sampler, "dist": {"nproc": 2}, "amp": True}})
        assert params.train.sampler == sampler and params.train.dist.world_size == 2
    for model in ("sage", "rgcn"):
        params = params_from_dict({"dataset": HETERO, "train": {
            "model": model, "sampler": "neighbor", "inference": {"mode": "layerwise"},
            "temporal": {"by": "node"}}})
        assert params.train.inference.mode == "layerwise"


def test_a_repeated_key_or_a_seed_past_int64_is_refused_in_one_line(tmp_path):
    """YAML keeps the last of two equal keys silently; torch.manual_seed takes [0, 2^63)."""
    path = tmp_path / "params.yaml"
    path.write_text("train:\n  lr: 0.1\n  epochs: 3\n  lr: 0.2\n")
    with pytest.raises(ParamsError, match=r"params.yaml: key 'lr' appears twice in one section "
                                          r"\(line 4\); keep one") as err:
        load_params(path)
    assert "\n" not in str(err.value)
    path.write_text("seed: 0\ntrain:\n  lr: 0.1\ndataset:\n  task: node\n")
    assert load_params(path).train.lr == 0.1  # equal keys in different sections are fine
    path.write_text(f"seed: {2**63}\n")
    with pytest.raises(ParamsError, match="seed=9223372036854775808 is out of range"):
        load_params(path)
    path.write_text(f"seed: {2**63 - 1}\n")
    assert load_params(path).seed == 2**63 - 1


def test_a_stage_parses_the_same_file_once_and_sees_an_edit(tmp_path, monkeypatch):
    """threads.configure and the stage's run both load params: one parse; an edit is re-read."""
    import gnnpipe.config.loading as loading

    parses = []
    real = loading._parse
    monkeypatch.setattr(loading, "_parse", lambda path, text: parses.append(text) or real(path, text))
    path = _write_yaml(tmp_path, "train:\n  lr: 0.02\n")
    first = load_params(path)
    assert load_params(path) is first and len(parses) == 1
    path.write_text("train:\n  lr: 0.03\n")  # same size, same second: the text decides
    assert load_params(path).train.lr == 0.03 and len(parses) == 2
    (tmp_path / "other").mkdir()
    other = _write_yaml(tmp_path / "other", "train:\n  lr: 0.03\n")
    assert load_params(other).train.lr == 0.03 and len(parses) == 3  # another file: parsed


def test_params_are_parsed_by_libyaml_where_pyyaml_has_it():
    import yaml

    import gnnpipe.config.loading as loading

    if yaml.__with_libyaml__:
        assert issubclass(loading._UniqueKeyLoader, yaml.CSafeLoader)
    else:
        assert issubclass(loading._UniqueKeyLoader, yaml.SafeLoader)
