"""Arrow tables routed from producers to buckets in one scratch file per producer (the id join of
the block-wise prepare, ``gnnpipe.data.block_ids``), as ``gnnpipe.io.blocks.save_routed`` does for
``.npy`` rows: a producer's rows sorted by bucket into ``<folder>/rows/<name>.arrow`` (Arrow IPC,
read back through a memory map) with the bucket offsets in ``<folder>/offsets/<name>.npy``, so an
exchange of P producers and B buckets writes 2P files, not P x B.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from gnnpipe.io.blocks import save_array


def save_routed_table(folder: Path, name: str, table: pa.Table, bucket: np.ndarray,
                      buckets: int) -> None:
    """``table``'s rows (n,) for ``buckets`` consumers, grouped by ``bucket`` int (n,) (stable)."""
    order = np.argsort(bucket, kind="stable")
    offsets = np.zeros(buckets + 1, dtype=np.int64)
    np.cumsum(np.bincount(bucket, minlength=buckets), out=offsets[1:])
    path = Path(folder) / "rows" / f"{name}.arrow"
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table.take(pa.array(order)))
    save_array(Path(folder) / "offsets" / f"{name}.npy", offsets)


def load_routed_table(folder: Path, bucket: int, schema: pa.Schema) -> pa.Table:
    """Bucket ``bucket`` of every producer's table in ``folder`` (producers in name order), as
    one table of ``schema``; none: an empty one."""
    parts = []
    rows = Path(folder) / "rows"
    for path in sorted(rows.glob("*.arrow")) if rows.is_dir() else []:
        offsets = np.load(Path(folder) / "offsets" / f"{path.stem}.npy")
        lo, hi = int(offsets[bucket]), int(offsets[bucket + 1])
        if hi > lo:  # the map stays open while its slice is referenced, copied just below
            parts.append(pa.ipc.open_file(pa.memory_map(str(path))).read_all().slice(lo, hi - lo))
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts).combine_chunks()
