"""``python -m gnnpipe.preflight``: check params.yaml before DVC touches anything.

DVC removes a stage's outputs before it hashes the stage's dependencies, so a ``dataset.path``
that does not exist ends `dvc repro` with DVC's own ``[Errno 2]`` line after ``data/prepared``
is gone. ``make repro`` runs this first: the whole params file is validated as a stage would,
and every input path dvc.yaml takes from params (``${dataset.path}``) must exist; otherwise one
line names the key and the path, and nothing has been removed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from gnnpipe.config.loading import load_params, to_dict
from gnnpipe.pipeline import STAGES

_PARAM = re.compile(r"^\$\{([a-z_.]+)\}$")


def missing_inputs(params_path: Path) -> list[str]:
    """One message per params-named input of the stage table that does not exist (paths
    relative to the folder of ``params_path``, where DVC runs the stages)."""
    values = to_dict(load_params(params_path))
    messages = []
    for artifact in (a for stage in STAGES.values() for a in stage.paths if a.kind == "in"):
        match = _PARAM.match(artifact.path)
        if not match:
            continue
        key, value = match.group(1), values
        for part in key.split("."):
            value = value[part]
        if not (params_path.parent / str(value)).exists():
            messages.append(f"{params_path}: {key} {str(value)!r} does not exist; set {key} to "
                            "your input folder or file (a DVC dependency of the prepare stage)")
    return messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gnnpipe.preflight",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    args = parser.parse_args(argv)
    try:
        messages = missing_inputs(args.params)
    except ValueError as err:
        messages = [str(err)]
    for message in messages[:1]:
        print(f"gnnpipe preflight: error: {message}", file=sys.stderr)
    return 1 if messages else 0


if __name__ == "__main__":
    sys.exit(main())
