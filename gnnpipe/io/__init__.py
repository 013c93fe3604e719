"""The filesystem layer: one module per artifact family, every reader and writer exported here.

A family is imported on the first use of one of its names (``io.read_classes`` imports
``gnnpipe.io.prepared`` alone), so a stage that reads JSON and Parquet, the report, starts
without torch (issue 46); ``io.<name>`` is the same object the family defines.
"""

import importlib
from pathlib import Path

from gnnpipe.io.atomic import (  # noqa: F401 (re-exported; atomic imports no torch)
    atomic_dir, atomic_path, read_json, remove_on_publish, write_csv, write_json, write_text)

# family -> the names it exports here, looked up in that family alone. A name not listed is
# looked up in every family, in this order (what `from gnnpipe.io.<family> import *` of each,
# in turn, gave); tests/pipeline/test_startup.py checks that each listed name is its family's.
FAMILIES = {
    "common": ("PHASES", "EDGES_SCHEMA", "SPLIT_SCHEMA", "PARTS_SCHEMA", "FEATURE_DTYPES",
               "READ_ERRORS", "ROLES", "reading", "role_codes", "role_names", "check_csr"),
    "description": ("DESCRIPTION", "DESCRIPTION_SCHEMA", "write_description", "read_description",
                    "read_featureless"),
    "features": ("FEATURES_SCHEMA", "FEATURE_KINDS", "write_features", "read_features"),
    "models": ("LINK_EVAL_PHASES", "MODEL_SCHEMA", "MODEL_SCHEMAS", "INFERENCE_KEYS",
               "write_predictions", "read_predictions", "write_link_predictions",
               "read_link_predictions", "write_hard_link_scores", "read_hard_link_scores",
               "save_model", "model_file", "read_model_file", "input_fingerprint",
               "write_checkpoint", "read_checkpoint"),
    "partitions": ("SHARD_SCHEMA", "SHARD_ARRAYS", "shard_folder", "ShardWriter", "shard_writer",
                   "write_partition", "read_partition", "write_partition_meta",
                   "read_partition_meta", "read_partition_shard"),
    "predictions": ("PREDICTIONS", "EMBEDDINGS", "PAIR_SCORES", "EMBEDDING_TYPES",
                    "DEFAULT_TOP_K", "predictions_schema", "embeddings_schema", "pair_scores_schema",
                    "write_blocks", "read_node_predictions", "read_embeddings", "read_pair_scores",
                    "read_model", "write_confusion"),
    "prepared": ("ROW_GROUP_ROWS", "GRAPH_SCHEMA", "NODES_SCHEMA_NAME", "EDGES_SCHEMA_NAME",
                 "AUTO_EXTERNAL_BYTES", "NPY_DTYPES", "nodes_file", "edges_file", "features_file",
                 "node_ids_file", "edge_attrs_file", "nodes_schema", "external_features",
                 "FeatureFileWriter", "stored_bytes", "write_prepared", "stored_features",
                 "require_columns", "read_edge_attrs", "write_classes", "read_classes"),
    "propagated": ("write_hop", "HopWriter", "RowFile", "hop_rows", "npy_rows", "hop_writers",
                   "write_propagate_meta", "read_propagated"),
    "splits": ("MESSAGE_SCHEMA", "write_split", "write_split_files", "read_split_meta",
               "LINK_EDGE_ROLES", "NEGATIVES_SCHEMA", "write_link_tables", "stream_link_tables",
               "read_link_meta", "read_link_edges", "read_link_negatives", "read_hard_negatives",
               "NEGATIVE_BATCH_ROWS", "read_negatives_table", "TRAINING_LINK_ROLES",
               "visible_link_blocks"),
    "typed": ("read_graph", "read_typed_node_ids", "read_typed_message_graphs",
              "read_typed_role_codes", "read_typed_link_split"),
}
OWNER = {name: family for family, names in FAMILIES.items() for name in names}


def exported(family: str) -> dict:
    """What ``from gnnpipe.io.<family> import *`` binds: its ``__all__``, else its public names."""
    module = importlib.import_module(f"gnnpipe.io.{family}")
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    return {name: getattr(module, name) for name in names}


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if (Path(__file__).parent / f"{name}.py").exists():  # a submodule: `io.splits`
        value = importlib.import_module(f"gnnpipe.io.{name}")
    elif name in OWNER:
        value = exported(OWNER[name])[name]
    else:
        found = [names[name] for names in map(exported, FAMILIES) if name in names]
        if not found:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = found[-1]  # the last family's, as the star imports in turn bound it
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *OWNER})
