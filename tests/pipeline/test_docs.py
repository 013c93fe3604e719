"""The docs cannot rot: README.md and docs/ are checked against the code.

- the params tables are what ``gnnpipe.params_doc`` generates from gnnpipe/config/schema.py now;
- README.md stays under 15 KB;
- every relative Markdown link (and its #anchor) of README.md, BENCHMARKS.md and docs/ resolves;
- every dotted params key in inline code names a real section or key;
- every fenced block names its language, and shell blocks are ```sh or ```bash;
- in every shell block, each command is one the checks know: cheap ones (``gnnpipe <stage>
  --help``, ``python -m gnnpipe.runtime.profiles ...``, ``make help``) are RUN here; every
  ``dvc exp run ... -S key=value`` (in blocks and in inline code) is validated by applying its
  overrides to params.yaml through gnnpipe.config's loader, without running DVC; the rest
  (other dvc / make / gnnpipe commands) run only in the release check below. A block that needs
  data or a machine no test has is preceded by ``<!-- docs-test: skip (reason) -->`` and listed
  in SKIPPED;
- ``mkdocs build --strict`` when mkdocs and mkdocs-material are importable (skipped otherwise:
  that skip means the site build is NOT covered);
- the release check (``make docs-check``, ``GNNPIPE_DOCS_CHECK=1``) runs every unmarked shell
  command for real in a scratch copy of the repository with a small graph (minutes; skipped in
  ``make test``).

docs/incoming/ (notes other changes leave for the docs) is outside these checks and the site.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gnnpipe import config, params_doc
from gnnpipe.runtime import profiles
from gnnpipe.config import samplers

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SHELL_LANGS = ("sh", "bash")
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((.+)\)\s*-->")
README_LIMIT = 15 * 1024

# Every skip-marked shell block, as (file, its first command): adding a skip means adding it here.
SKIPPED = {
    ("README.md", "make repro"),
    ("README.md", "dvc exp run --temp -S dataset.source=parquet"),
    ("docs/evaluation.md", "for depth in 1 2 3 4 5 6 7 8; do dvc exp run --queue -n depth-$depth "
                           "-S train.num_layers=$depth; done"),
    ("docs/models.md", "python -m bench.heterophily"),
    ("docs/models.md", "python -m bench.heterophily --nodes 5000 --classes 5 --features 64 "
                       "--signal 1.0  --homophily 0.05 0.2 --seeds 3 --models mlp gcn sage sep"),
    ("docs/scaling.md", "make repro-scale"),
    ("docs/sharing.md", 'pip install -e ".[s3]"'),
    ("docs/sharing.md", "dvc remote modify --local s3store endpointurl "
                        "https://minio.example.org:9000"),
    ("docs/sharing.md", "git clone git@github.com:me/gnnpipe.git gnnpipe-2 && cd gnnpipe-2"),
    ("docs/sharing.md", "pip install dvc-gs"),
    ("docs/sharing.md", "dvc remote modify --local gnnpipe-store url /mnt/team/gnnpipe-store"),
    ("docs/sharing.md", "dvc exp run -n lr-02 -S train.lr=0.02"),
    ("docs/sharing.md", "dvc exp list origin"),
    ("docs/sharing.md", "dvc push"),
    ("docs/sharing.md", "dvc artifacts get git@github.com:me/gnnpipe.git gnn-model -o model.pt"),
    ("docs/sharing.md", "git clone /path/to/first gnnpipe-2 && cd gnnpipe-2"),
    ("docs/sharing.md", "dvc remote modify --local s3store connect_timeout 5"),
    ("docs/typed-graphs.md", "dvc exp run --temp -S dataset.source=parquet -S dataset.layout=typed "
                             "-S dataset.edges.timestamp=ts"),
}
DVC_COMMANDS = {("exp", "show"), ("exp", "apply"), ("metrics", "show"), ("metrics", "diff"),
                ("plots", "show"), ("plots", "diff"), ("queue", "start"), ("queue", "status"),
                ("repro",), ("dag",), ("push",), ("pull",), ("status",)}


def doc_files() -> list[Path]:
    """README.md and docs/**/*.md, docs/incoming excluded."""
    docs = sorted(p for p in (REPO / "docs").rglob("*.md") if "incoming" not in p.parts)
    return [REPO / "README.md", *docs]


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@dataclasses.dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    skip: str | None  # the reason of a preceding skip marker


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file (fences at column 0)."""
    out, lines, i = [], path.read_text().splitlines(), 0
    while i < len(lines):
        match = re.match(r"^```(\S*)\s*$", lines[i])
        if match is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = SKIP.search(before)
        out.append(Block(path, i + 1, match[1], "\n".join(lines[i + 1:end]),
                         marker[1] if marker else None))
        i = end + 1
    return out


def commands(block: Block) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block.text)
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(line.split(" #")[0].strip() if "#" in line else line.strip())
    return out


def shell_blocks() -> list[Block]:
    return [b for path in doc_files() for b in blocks(path) if b.lang in SHELL_LANGS]


def _makefile_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))


def kind(command: str) -> str | None:
    """run (cheap: run by this test), exp (validated here, run by the release check), release
    (run by the release check only), or None (unknown: the block must be skip-marked)."""
    words = shlex.split(command)
    if words[:1] == ["gnnpipe"] and "--help" in words or words == ["gnnpipe", "--help"]:
        return "run"
    if words[:3] == ["python", "-m", "gnnpipe.runtime.profiles"] or words == ["make", "help"]:
        return "run"
    if words[:3] == ["dvc", "exp", "run"]:
        return "exp"
    if words[:1] == ["dvc"] and (tuple(words[1:3]) in DVC_COMMANDS
                                 or tuple(words[1:2]) in DVC_COMMANDS):
        return "release"
    if words[:1] == ["make"] and len(words) == 2 and words[1] in _makefile_targets():
        return "release"
    if words[:1] == ["gnnpipe"]:
        return "release"
    return None


# ------------------------------------------------------------------- dvc exp run validation
def overrides(command: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of a ``dvc exp run`` command's -S / --set-param options; a
    ``$(python -m gnnpipe.runtime.profiles FILE)`` is expanded as the shell would."""
    profile = re.search(r"\$\(python -m gnnpipe\.profiles (\S+)\)", command)
    if profile:
        args = profiles.set_args(REPO / profile[1], REPO / "params.yaml")
        command = command.replace(profile[0], shlex.join(args))
    words = shlex.split(command, comments=True)
    pairs = []
    for flag, value in zip(words, words[1:]):
        if flag in ("-S", "--set-param"):
            key, _, raw = value.partition("=")
            pairs.append((key, raw))
    return pairs


def apply_overrides(pairs: list[tuple[str, str]]) -> config.Params:
    """params.yaml with each override applied as DVC does (the value parsed as YAML; a key
    params.yaml lacks is refused), validated by gnnpipe.config."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    for key, value in pairs:
        node, parts = raw, key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                raise ValueError(f"-S {key}: params.yaml has no section {part!r}")
            node = node[part]
        if parts[-1] not in node:
            raise ValueError(f"-S {key}: params.yaml has no key {parts[-1]!r}")
        node[parts[-1]] = yaml.safe_load(value)
    return config.params_from_dict(raw)


def inline_exp_runs(path: Path) -> list[str]:
    """``dvc exp run ... -S ...`` in inline code, outside fenced blocks (placeholders with
    '...' or '<' are prose, not commands)."""
    prose = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    spans = re.findall(r"`(dvc exp run [^`]*)`", prose.replace("\n", " "))
    return [s for s in spans if " -S " in s and "..." not in s and "<" not in s]


def every_exp_run() -> list[tuple[str, str]]:
    out = [(f"{rel(b.path)}:{b.line}", c) for b in shell_blocks() for c in commands(b)
           if kind(c) == "exp"]
    out += [(rel(p), c) for p in doc_files() for c in inline_exp_runs(p)]
    return out


def test_every_documented_exp_run_has_valid_overrides():
    checked = every_exp_run()
    assert len(checked) >= 20, "the docs' experiments were not found"
    bad = []
    for where, command in checked:
        if "$depth" in command:  # the depth sweep's loop variable: checked with a value
            command = command.replace("$depth", "2")
        try:
            pairs = overrides(command)
            assert pairs, "no -S key=value"
            apply_overrides(pairs)
        except (ValueError, AssertionError) as err:
            bad.append(f"{where}: {command}\n    {err}")
    assert not bad, "\n".join(bad)


def test_the_override_check_fails_on_a_renamed_key_or_a_bad_value():
    with pytest.raises(ValueError, match="no key 'lrr'"):
        apply_overrides(overrides("dvc exp run --temp -S train.lrr=0.1"))
    with pytest.raises(ValueError, match="train.model='gatt' is not valid"):
        apply_overrides(overrides("dvc exp run -S train.model=gatt"))
    with pytest.raises(ValueError, match="train.sampler"):  # a cross-field rule (config/samplers.py)
        apply_overrides(overrides("dvc exp run -S train.model=sign"))
    params = apply_overrides(overrides(
        "dvc exp run --temp -S 'train.neighbor.num_neighbors=[25,10]' -S train.amp=true"))
    assert params.train.neighbor.num_neighbors == (25, 10) and params.train.amp is True


def _is_param(key: str, tree: dict) -> bool:
    node = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_params_keys_named_in_the_docs_exist():
    """A dotted key in inline code (`train.neighbor.num_neighbors`, `split.node.mode: time`)
    names a params section or key, so a renamed key fails here."""
    tree = config.to_dict(config.Params())
    key = re.compile(rf"(?<![\w/.{{,-])((?:{'|'.join(tree)})(?:\.[a-z_0-9]+)+)")
    files = ("json", "pt", "py", "csv", "parquet", "yaml", "md", "png", "html")
    found, bad = 0, []
    for path in doc_files():
        for span in re.findall(r"`([^`\n]+)`", path.read_text()):
            for name in key.findall(span):
                if name.rsplit(".", 1)[1] in files or "unknown key" in span:
                    continue  # a file name, or the docs' example of a refused key
                found += 1
                if not _is_param(name, tree):
                    bad.append(f"{rel(path)}: {name} (in `{span}`)")
    assert found > 200 and not bad, bad


# ----------------------------------------------------------------------------- shell blocks
def test_fences_name_their_language():
    bad = [f"{rel(b.path)}:{b.line}" for p in doc_files() for b in blocks(p) if not b.lang]
    bad += [f"{rel(b.path)}:{b.line} ```{b.lang}" for p in doc_files() for b in blocks(p)
            if b.lang in ("shell", "console", "zsh")]
    assert not bad, f"give each fence a language (```sh for commands, ```text for output): {bad}"
    indented = [rel(p) for p in doc_files()
                if re.search(r"^[ \t]+```", p.read_text(), re.M)]
    assert not indented, f"indented fences escape these checks: {indented}"


def test_skipped_blocks_are_the_listed_ones_and_give_a_reason():
    found = {(rel(b.path), commands(b)[0]) for b in shell_blocks() if b.skip}
    assert found == SKIPPED
    assert all(len(b.skip) > 10 for b in shell_blocks() if b.skip)


def test_every_unmarked_command_is_known():
    unknown = [f"{rel(b.path)}:{b.line}: {c}" for b in shell_blocks() if not b.skip
               for c in commands(b) if kind(c) is None]
    assert not unknown, ("commands no check runs; make them checkable or mark the block "
                         f"<!-- docs-test: skip (reason) -->: {unknown}")


def _env(cwd: Path) -> dict:
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(cwd),
                GNNPIPE_PROGRESS="0", DVC_NO_ANALYTICS="1", DVC_NO_UPDATE_CHECK="1")


def test_cheap_commands_run(capsys):
    """Run in this process through the same entry points as the console scripts (the
    `gnnpipe` script is gnnpipe.cli:main), so torch is imported once; `make` in a shell."""
    from gnnpipe import cli

    cheap = sorted({c for b in shell_blocks() if not b.skip for c in commands(b)
                    if kind(c) == "run"})
    assert {"make help", "gnnpipe --help"} <= set(cheap)
    for command in cheap:
        words = shlex.split(command)
        if words[0] == "make":
            done = subprocess.run(words, cwd=REPO, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and "make repro" in done.stdout, command
            continue
        main = cli.main if words[0] == "gnnpipe" else profiles.main
        argv = words[1:] if words[0] == "gnnpipe" else words[3:]
        with pytest.raises(SystemExit) as exit_info:
            sys.exit(main(argv))
        out = capsys.readouterr()
        assert exit_info.value.code in (0, None), f"{command}: {out.err}"
        assert out.out.strip(), f"{command} printed nothing"


# ------------------------------------------------------------------------ generated tables
def test_params_tables_are_generated_from_config():
    assert params_doc.stale() == [], "run: python -m gnnpipe.params_doc --write"


def test_params_table_lists_every_key_with_its_default():
    rows = {r.key: r for r in params_doc.rows()}
    raw = yaml.safe_load((REPO / "params.yaml").read_text())

    def leaves(tree, prefix=""):
        for key, value in tree.items():
            yield from (leaves(value, f"{prefix}{key}.") if isinstance(value, dict)
                        else [(f"{prefix}{key}", value)])

    assert {k for k, _ in leaves(raw)} == set(rows)
    assert rows["train.neighbor.num_neighbors"].default == "[15, 10]"
    assert rows["split.node.mode"].default == "auto"  # the field's default, not the resolved one
    assert "one of: full, layerwise, auto" in rows["train.inference.mode"].help
    assert all(r.help and not r.help.startswith("*") for r in rows.values()), \
        [k for k, r in rows.items() if r.help.startswith("*")]


def test_sampler_table_has_one_row_per_sampler_from_the_config_samplers_table():
    text = params_doc.full_tables(params_doc.rows())
    section = text.split("### train.sampler", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(samplers.SAMPLERS)
    cluster = next(r for r in rows if r.startswith("| `cluster`"))
    assert "partition, shards" in cluster and "train.cluster" in cluster


def test_a_stale_table_is_caught(tmp_path):
    for name in (params_doc.SCHEMA, "params.yaml", "README.md", "docs/params.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    assert params_doc.stale(tmp_path) == []
    source = (tmp_path / params_doc.SCHEMA).read_text()
    changed = source.replace("# Adam learning rate", "# the Adam step size")
    assert changed != source
    (tmp_path / params_doc.SCHEMA).write_text(changed)
    assert params_doc.stale(tmp_path) == ["README.md", "docs/params.md"]


def test_readme_is_short():
    assert len((REPO / "README.md").read_bytes()) < README_LIMIT


# ---------------------------------------------------------------------------------- links
def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading (also mkdocs' for the headings used here)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = github_slug(heading)
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def broken_links(path: Path) -> list[str]:
    bad = []
    for target in links(path):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not checked (no network)
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{rel(path)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{rel(path)}: {target} (no heading #{anchor})")
    return bad


def test_relative_links_resolve():
    files = [*doc_files(), REPO / "BENCHMARKS.md"]
    assert sum(len(links(p)) for p in files) > 50
    bad = [b for p in files for b in broken_links(p)]
    assert not bad, "\n".join(bad)


def test_the_link_check_catches_a_broken_file_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Top part\n\n[x](b.md) [y](#top-part) [z](#nowhere)\n"
                                   "`[not](a link)`\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys.modules[__name__], "REPO", tmp_path)
        assert broken_links(tmp_path / "a.md") == ["a.md: b.md (no such file)",
                                                   "a.md: #nowhere (no heading #nowhere)"]


def nav_pages(nav: list) -> set[str]:
    """The pages of an mkdocs nav: ``- Title: page.md`` items and sections of them, any depth."""
    pages = set()
    for item in nav:
        for value in item.values():
            pages |= nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_docs_pages_are_in_the_site_nav():
    listed = nav_pages(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])
    pages = {rel(p)[len("docs/"):] for p in doc_files()[1:]}
    assert listed == pages


# ----------------------------------------------------------------------------------- mkdocs
def test_site_builds_strict(tmp_path):
    """Skipped where mkdocs / mkdocs-material are not installed (the `docs` extra): then the
    site build is not covered by `make test`; `make docs` runs it."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site/samplers/index.html").exists()


# ------------------------------------------------------------------------ the release check
@pytest.mark.skipif(os.environ.get("GNNPIPE_DOCS_CHECK") != "1",
                    reason="release check: make docs-check (runs every documented command)")
def test_docs_check_runs_every_unmarked_block(tmp_path):
    from test_pipeline import make_scratch_repo  # tests/e2e/, on pytest's pythonpath

    repo = make_scratch_repo(tmp_path / "repo")
    for name in ("Makefile", "profiles", "README.md", "docs", "bench"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, repo / name)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam",
                    "docs"], cwd=repo, check=False)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm",
                    "docs"], cwd=repo, check=True)
    todo = [("setup", "dvc repro")] + [
        (f"{rel(b.path)}:{b.line}", c) for b in shell_blocks() if not b.skip
        for c in commands(b)]
    failures = []
    for where, command in todo:
        start = time.monotonic()
        done = subprocess.run(["bash", "-c", command], cwd=repo, env=_env(repo),
                              capture_output=True, text=True, timeout=1800)
        status = "ok" if done.returncode == 0 else f"FAILED ({done.returncode})"
        print(f"{status:>12} {time.monotonic() - start:7.1f} s  {where}: {command}", flush=True)
        if done.returncode:
            failures.append(f"{where}: {command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    assert not failures, "\n\n".join(failures)
