"""Named parameter profiles: a YAML file of overrides on params.yaml, run as a DVC experiment.

``python -m gnnpipe.runtime.profiles profiles/scale.yaml`` checks the overrides against the params
schema (merged onto params.yaml, so a typo fails here, before any stage runs) and prints one
``-S key=value`` pair per leaf, for ``dvc exp run $(python -m gnnpipe.runtime.profiles FILE)``.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

import yaml

from gnnpipe.config import params_from_dict

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "none", "~"}


def _read_yaml(path: Path) -> dict:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: profile file not found") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a profile must be a mapping of params sections")
    return raw


def _merge(base: dict, overrides: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _leaves(tree: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for key, value in tree.items():
        name = f"{prefix}{key}"
        out += _leaves(value, f"{name}.") if isinstance(value, dict) else [(name, value)]
    return out


def set_args(profile: Path, params: Path = Path("params.yaml")) -> list[str]:
    """``["-S", "a.b=1", ...]`` for the leaves of ``profile``, validated against ``params``."""
    overrides = _read_yaml(profile)
    try:
        params_from_dict(_merge(_read_yaml(params), overrides))
    except ValueError as err:
        raise ValueError(f"{profile}: {err}") from None
    return [arg for key, value in _leaves(overrides) for arg in ("-S", f"{key}={_word(value)}")]


def _word(value: object) -> str:
    """One shell word that DVC's YAML parsing of ``-S`` turns back into ``value``."""
    if isinstance(value, str) and _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    return json.dumps(value, separators=(",", ":"))  # JSON without spaces is also YAML


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gnnpipe.runtime.profiles", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path, help="YAML of overrides, e.g. profiles/scale.yaml")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    args = parser.parse_args(argv)
    try:
        print(" ".join(set_args(args.profile, args.params)))
    except ValueError as err:
        print(f"gnnpipe profiles: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
