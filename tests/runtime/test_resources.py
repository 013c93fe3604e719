"""The per-stage cost record: wall time, peak RSS and bytes on disk of each output file."""

import json

import pytest
import yaml

from gnnpipe.runtime import resources
from gnnpipe.cli import main


def _params(tmp_path, **synthetic):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"dataset": {"synthetic": {
        "num_nodes": 300, "num_features": 8, "avg_degree": 4.0, **synthetic}}}))
    return path


def test_prepare_records_its_time_memory_and_every_output_file(tmp_path):
    out, record = tmp_path / "prepared", tmp_path / "perf" / "prepare.json"
    code = main(["prepare", "--params", str(_params(tmp_path)), "--out", str(out),
                 "--metrics", str(tmp_path / "prepare.json"), "--resources", str(record)])
    assert code == 0
    got = json.loads(record.read_text())
    files = {str(f): f.stat().st_size for f in out.rglob("*") if f.is_file()}
    assert got["stage"] == "prepare" and got["bytes"] == files and len(files) >= 3
    assert got["total_bytes"] == sum(files.values())
    assert 0 < got["seconds"] < 600
    # a Python process that imported torch holds tens of MiB at least
    assert got["peak_rss_mb"] >= got["peak_rss_mb_self"] > 50


def test_no_record_without_the_flag_or_when_the_stage_fails(tmp_path):
    record = tmp_path / "perf.json"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"dataset": {"synthetic": {"num_nodes": 1}}}))
    assert main(["prepare", "--params", str(bad), "--out", str(tmp_path / "p"),
                 "--resources", str(record)]) == 1
    assert not record.exists()
    assert main(["prepare", "--params", str(_params(tmp_path)), "--out", str(tmp_path / "q"),
                 "--metrics", str(tmp_path / "m.json")]) == 0
    assert not list(tmp_path.rglob("perf*.json"))


def test_bytes_on_disk_of_a_file_a_folder_and_a_missing_path(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.bin").write_bytes(b"x" * 10)
    (tmp_path / "d" / "sub" / "b.bin").write_bytes(b"y" * 3)
    assert resources.bytes_on_disk(tmp_path / "d") == {"a.bin": 10, "sub/b.bin": 3}
    assert resources.bytes_on_disk(tmp_path / "d" / "a.bin") == {"a.bin": 10}
    assert resources.bytes_on_disk(tmp_path / "nope") == {}


def test_torchrun_ranks_do_not_write_the_record(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert not resources.is_worker_process()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resources.is_worker_process()


def test_release_memory_returns_freed_heap_to_the_os():
    """glibc keeps freed small blocks in the process; ``release_memory`` trims them (and
    pyarrow's pool): RssAnon falls back near where it was before the allocations."""
    import ctypes
    import sys

    from gnnpipe.runtime.resources import release_memory

    if not sys.platform.startswith("linux") or resources._MALLOC_TRIM is None:
        pytest.skip("glibc's malloc_trim is Linux-only")

    def anon_mib() -> float:
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"):
                return int(line.split()[1]) / 1024
        return 0.0

    mallopt = ctypes.CDLL(None).mallopt
    mallopt(-1, 128 * 1024 * 1024)  # M_TRIM_THRESHOLD: glibc's own trim on free does not run
    try:
        before = anon_mib()
        blocks = [ctypes.create_string_buffer(1000) for _ in range(200_000)]  # ~200 MB, small
        grown = anon_mib()
        del blocks
        assert grown - before > 100
        assert release_memory() is True
        assert anon_mib() - before < (grown - before) / 2
    finally:
        mallopt(-1, 128 * 1024)  # glibc's default threshold



LARGE_BLOCK_CHECK = """
import ctypes
from gnnpipe.runtime import resources

def mapping_of(address):
    for line in open("/proc/self/maps"):
        fields = line.split()
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if lo <= address < hi:
            return fields[5] if len(fields) > 5 else "anonymous"

libc = ctypes.CDLL(None)
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
libc.free(libc.malloc(4 << 20))  # glibc now takes blocks up to 4 MiB from the heap
with resources.large_blocks_mapped():
    inside = libc.malloc(2 << 20)
    print(mapping_of(inside))
    libc.free(inside)
after = libc.malloc(2 << 20)
print(mapping_of(after))
"""


def test_large_blocks_mapped_gives_large_blocks_their_own_mapping():
    """A process that freed a 4 MiB block takes 2 MiB blocks from its heap (glibc raised its
    threshold); inside ``large_blocks_mapped`` such a block the heap has no room for is a
    mapping of its own (unmapped when freed: the heap does not grow for it); after it, from
    the heap again. A fresh interpreter, so no earlier test's free heap serves it."""
    import subprocess
    import sys

    if not sys.platform.startswith("linux") or resources._MALLOPT is None:
        pytest.skip("glibc's mallopt is Linux-only")
    out = subprocess.run([sys.executable, "-c", LARGE_BLOCK_CHECK], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["anonymous", "[heap]"]
