"""Arrow tables routed from producers to buckets in one scratch file per producer (the id join of
the block-wise prepare, ``gnnpipe.data.block_ids``), as ``gnnpipe.io.blocks.save_routed`` does for
``.npy`` rows: a producer's rows go to ``<folder>/<name>.arrow`` (Arrow IPC) as one record batch per
bucket, in bucket order, so an exchange of P producers and B buckets writes P files, not P x B, and
a consumer reads only its own batch of each file (no memory map: its pages never count as the
reader's).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa


def bucket_order(bucket: np.ndarray, buckets: int) -> tuple[np.ndarray | slice, np.ndarray]:
    """The stable order (n,) that groups rows by ``bucket`` (n,) in ``[0, buckets)`` (all rows
    when already grouped: a join's rows come in block order; else numpy's radix sort for 16-bit
    keys, ~3x its merge sort of int64 keys), and the groups' offsets int64 (buckets + 1,)."""
    offsets = np.zeros(buckets + 1, dtype=np.int64)
    np.cumsum(np.bincount(bucket, minlength=buckets), out=offsets[1:])
    if not (bucket[1:] < bucket[:-1]).any():
        return slice(None), offsets
    keys = bucket.astype(np.int16, copy=False) if buckets <= 1 << 15 else bucket
    return np.argsort(keys, kind="stable"), offsets


def save_routed_table(folder: Path, name: str, table: pa.Table, bucket: np.ndarray,
                      buckets: int) -> None:
    """``table``'s rows (n,) for ``buckets`` consumers, grouped by ``bucket`` int (n,) (stable)."""
    order, offsets = bucket_order(bucket, buckets)
    rows = table if isinstance(order, slice) else table.take(pa.array(order))
    batch = pa.record_batch([rows.column(i).combine_chunks() for i in range(rows.num_columns)],
                            schema=rows.schema)
    path = Path(folder) / f"{name}.arrow"
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
        for lo, hi in zip(offsets[:-1], offsets[1:]):
            writer.write_batch(batch.slice(int(lo), int(hi - lo)))


def load_routed_table(folder: Path, bucket: int, schema: pa.Schema) -> pa.Table:
    """Bucket ``bucket`` of every producer's table in ``folder`` (producers in name order), as
    one table of ``schema``; none: an empty one."""
    batches = []
    for path in sorted(Path(folder).glob("*.arrow")) if Path(folder).is_dir() else []:
        with pa.OSFile(str(path), "rb") as source:
            batch = pa.ipc.open_file(source).get_batch(bucket)
        if batch.num_rows:
            batches.append(batch)
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches(batches).combine_chunks()
