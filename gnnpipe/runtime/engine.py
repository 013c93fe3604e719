"""Where a data-path stage runs its block work (params ``cluster``): in this process, or on Dask.

``cluster.engine: local`` (the default) runs everything in the stage process, as always.
``cluster.engine: dask`` hands blocks to a Dask cluster: the scheduler at ``cluster.address``
(a real cluster; every worker must see the repository at the same path: it is made each
worker's working folder, so the stages' relative paths resolve there), or, with no address,
an embedded ``LocalCluster`` of ``cluster.workers`` worker processes with
``cluster.memory_limit`` each, started inside the stage and torn down when it ends (also on
an error; a killed stage's workers exit with it, Dask's nanny pipe sees the parent go).

``session(cfg)`` is the one entry point: a context manager that yields ``None`` (local) or a
connected ``distributed.Client``. Waits are bounded by ``cluster.start_timeout_s``; a scheduler
that does not answer, or a cluster that does not start, is a one-line ``EngineError``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import tempfile
from typing import Iterator

from gnnpipe.config.schema import EngineParams


class EngineError(ValueError):
    """The Dask cluster could not be reached or started (one line, naming the params key)."""


@contextlib.contextmanager
def session(cfg: EngineParams) -> Iterator[object | None]:
    """``None`` for ``engine: local``; for ``engine: dask`` a ``distributed.Client``, connected
    to ``cfg.address`` or to an embedded ``LocalCluster`` closed (with its worker processes and
    scratch folder) when the block exits."""
    if cfg.engine == "local":
        yield None
        return
    import dask  # heavy (about 1 s to import): only the dask engine needs it
    from distributed import Client, LocalCluster

    if cfg.address:
        try:
            client = Client(cfg.address, timeout=cfg.start_timeout_s, set_as_default=False)
        except (OSError, TimeoutError) as err:
            raise EngineError(f"cluster.address {cfg.address}: no Dask scheduler answered within "
                              f"{cfg.start_timeout_s:g} s ({type(err).__name__})") from None
        with client, _killed_tasks(cfg):
            _ready(client, cfg)
            yield client
        return
    # worker spill files and logs go to a per-run folder, removed at exit (nothing left in /tmp)
    scratch = tempfile.mkdtemp(prefix="gnnpipe-dask-")
    try:
        with dask.config.set({"temporary-directory": scratch}), \
                _cluster(cfg, scratch, LocalCluster) as cluster, \
                Client(cluster, set_as_default=False) as client, _killed_tasks(cfg):
            yield client
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _killed_tasks(cfg: EngineParams) -> Iterator[None]:
    """Dask's ``KilledWorker`` (a task whose workers all died running it: most often each went
    past its memory limit and its nanny restarted it) as one line naming the task and the keys
    that size it."""
    from distributed.scheduler import KilledWorker

    try:
        yield
    except KilledWorker as err:
        task = str(err.task[0] if isinstance(err.task, tuple) else err.task)
        name = task.split("-")[0]  # Dask's key: the function's name, then a token
        limit = f"cluster.memory_limit={cfg.memory_limit}" if not cfg.address else "its limit"
        raise EngineError(f"cluster: Dask task {name} died on {err.allowed_failures + 1} "
                          f"worker(s) running it (a worker past {limit} is restarted by its "
                          "nanny): raise the limit or make the stage's tasks smaller (its "
                          "block_rows; partition: more partition.num_parts or a smaller "
                          "partition.halo_hops)") from None


def _ready(client, cfg: EngineParams) -> None:
    """A scheduler at ``cfg.address`` with at least one worker, every worker working in this
    process's folder: the stages hand tasks paths relative to the repository root, and a
    worker started elsewhere would read other files or none (one line otherwise)."""
    try:
        client.wait_for_workers(1, timeout=cfg.start_timeout_s)
    except TimeoutError:
        raise EngineError(f"cluster.address {cfg.address}: the scheduler has no workers after "
                          f"{cfg.start_timeout_s:g} s (cluster.start_timeout_s); start "
                          "`dask worker` processes against it") from None
    folder = os.getcwd()
    blind = sorted(w for w, seen in client.run(enter_folder, folder).items() if not seen)
    if blind:
        raise EngineError(f"cluster.address {cfg.address}: worker {blind[0]} cannot see "
                          f"{folder} ({len(blind)} of them): every worker needs the repository "
                          "at the same path (a shared filesystem)")


def enter_folder(folder: str) -> bool:
    """On a worker: work in ``folder`` if it exists there (True), else leave it (False)."""
    if not os.path.isdir(folder):
        return False
    os.chdir(folder)
    return True


def run_blocks(client, fn, calls: list[tuple], **common) -> list:
    """``fn(*call, **common)`` for every call, on the workers (in this process without a
    client); results in call order."""
    if client is None:
        return [fn(*call, **common) for call in calls]
    if not calls:
        return []
    # bound, not passed as map's kwargs: Dask would read tuples and lists in them as tasks
    futures = client.map(functools.partial(fn, **common), *map(list, zip(*calls)), pure=False)
    return client.gather(futures)


@contextlib.contextmanager
def _cluster(cfg: EngineParams, scratch: str, local_cluster) -> Iterator[object]:
    """The embedded ``LocalCluster`` (``cfg``'s workers and limits), closed at exit."""
    try:
        cluster = local_cluster(
            n_workers=cfg.workers, threads_per_worker=cfg.threads_per_worker,
            memory_limit=cfg.memory_limit, processes=True, dashboard_address=None,
            # without a dashboard the scheduler still serves its health routes, on 8787 by default
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
            local_directory=scratch, silence_logs=logging.ERROR, timeout=cfg.start_timeout_s)
    except (OSError, TimeoutError, RuntimeError) as err:  # Dask: "Nanny failed to start."
        raise EngineError(f"cluster: the embedded LocalCluster ({cfg.workers} workers) did not "
                          f"start within {cfg.start_timeout_s:g} s: {_first_line(err)}") from None
    with cluster:
        yield cluster


def _first_line(err: BaseException) -> str:
    return next((line.strip() for line in str(err).splitlines() if line.strip()),
                type(err).__name__)[:200]
