"""Screenshots of reports/report.html of small pipelines, to look at the report as a person does.

    python bench/report_screenshot.py --out /tmp/shots                   # default and link
    python bench/report_screenshot.py --out /tmp/shots --pipelines default --height 6000

Each pipeline runs in a scratch folder as bench/compare_artifacts.py runs it (600-node graphs,
12 epochs; ``--set evaluate.seeds=3`` style overrides on top), then headless Chromium renders
its report at ``--width`` (1280 px: a laptop) to ``<out>/<pipeline>.png`` and keeps the run in
``<out>/<pipeline>/``. Needs a Chromium binary (Debian: ``apt-get install chromium``); the
tests need none (they check the page's HTML and SVG). Chromium runs without network, sandbox
or profile state, so the page must be self-contained to look right here.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

if __package__ in (None, ""):  # `python bench/report_screenshot.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import compare_artifacts

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# headless, no network side channels, a throwaway profile: what renders is the file alone
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")


def browser() -> str:
    """The first Chromium on PATH; one line naming the package when there is none."""
    found = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    if found is None:
        raise SystemExit(f"no headless browser found (tried {', '.join(BROWSERS)}); "
                         "install Debian's chromium package")
    return found


def screenshot(html: Path, png: Path, width: int, height: int) -> None:
    """``html`` rendered at ``width`` x ``height`` CSS pixels into ``png`` (the page's top
    ``height`` pixels: Chromium's --screenshot takes the window, not the full page)."""
    with tempfile.TemporaryDirectory(prefix="report-screenshot-") as profile:
        subprocess.run([browser(), *FLAGS, f"--user-data-dir={profile}",
                        f"--window-size={width},{height}", f"--screenshot={png}",
                        html.resolve().as_uri()],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def override(spec: str) -> dict:
    """``a.b=value`` -> ``{"a": {"b": value}}`` (value read as YAML)."""
    key, _, value = spec.partition("=")
    tree: dict = {}
    node = tree
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = yaml.safe_load(value)
    return tree


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNGs and runs")
    parser.add_argument("--pipelines", default="default,link",
                        help=f"comma-separated, of {', '.join(compare_artifacts.PIPELINES)}")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a params override on top of the pipeline's, e.g. evaluate.seeds=3")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=4000)
    args = parser.parse_args(argv)
    browser()  # fail before minutes of training, not after
    extra: dict = {}
    for spec in args.set:
        compare_artifacts.merge(extra, override(spec))
    args.out.mkdir(parents=True, exist_ok=True)
    for name in filter(None, args.pipelines.split(",")):
        compare_artifacts.PIPELINES[name] = compare_artifacts.merge(
            json.loads(json.dumps(compare_artifacts.PIPELINES[name])), extra)
        compare_artifacts.run_pipeline(name, True, compare_artifacts.STAGES, args.out)
        png = args.out / f"{name}.png"
        screenshot(args.out / name / "reports" / "report.html", png, args.width, args.height)
        print(f"{name}: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
