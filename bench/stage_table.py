"""The cost of every stage of the last pipeline run, as a Markdown table for docs/benchmarks/.

Reads the records ``gnnpipe <stage> --resources`` wrote (dvc.yaml: metrics/perf/stages/*.json)
and ``metrics/prepare.json`` for the graph size, then prints one row per stage (wall time, peak
RSS, bytes it wrote) and the bytes per node and per edge of the big artifacts, the
figures docs/scaling.md extrapolates from.

    python -m bench.stage_table [--metrics metrics]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gnnpipe.pipeline import STAGES


def _mib(num_bytes: float) -> str:
    return f"{num_bytes / 2**20:,.0f}"


def table(metrics: Path) -> str:
    records = {path.stem: json.loads(path.read_text())
               for path in sorted((metrics / "perf" / "stages").glob("*.json"))}
    if not records:
        raise SystemExit(f"no stage records under {metrics}/perf/stages: run `dvc repro` first")
    graph = json.loads((metrics / "prepare.json").read_text())
    nodes, edges = graph["nodes"], graph["edges"]
    lines = [f"{nodes:,} nodes, {edges:,} directed edges", "",
             "| stage | wall s | peak RSS MiB | wrote MiB |", "|---|---:|---:|---:|"]
    names = [n for n in STAGES if n in records] + sorted(set(records) - set(STAGES))
    for name in names:
        rec = records[name]
        lines.append(f"| {name} | {rec['seconds']:,.1f} | {rec['peak_rss_mb']:,.0f} | "
                     f"{_mib(rec['total_bytes'])} |")
    total = sum(records[n]["seconds"] for n in names)
    peak = max(records[n]["peak_rss_mb"] for n in names)
    lines.append(f"| **all** | **{total:,.1f}** | **{peak:,.0f}** (max) | "
                 f"{_mib(sum(records[n]['total_bytes'] for n in names))} |")
    lines += ["", "| artifact | MiB | bytes / node | bytes / edge |", "|---|---:|---:|---:|"]
    for name in names:
        for path, size in sorted(records[name]["bytes"].items()):
            if size >= 2**20:
                lines.append(f"| {path} | {_mib(size)} | {size / nodes:,.1f} | "
                             f"{size / max(edges, 1):,.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metrics", type=Path, default=Path("metrics"))
    print(table(parser.parse_args().metrics))


if __name__ == "__main__":
    main()
