"""Where a data-path stage runs its block work (params ``cluster``): in this process, or on Dask.

``cluster.engine: local`` (the default) runs everything in the stage process, as always.
``cluster.engine: dask`` hands blocks to a Dask cluster: the scheduler at ``cluster.address``
(a real cluster; every worker must see the repository at the same path: it is made each
worker's working folder, so the stages' relative paths resolve there), or, with no address,
an embedded ``LocalCluster`` of ``cluster.workers`` worker processes with
``cluster.memory_limit`` each, started inside the stage and torn down when it ends (also on
an error; a killed stage's workers exit with it, Dask's nanny pipe sees the parent go).

A Dask scheduler runs whatever its clients submit, pickled, on every worker: a real cluster is
reached over ``tls://`` with mutual authentication (``cluster.tls``: the cluster's CA and this
client's certificate and key, Dask's ``Security``), plain ``tcp://`` only on loopback unless
``cluster.allow_insecure`` (the params rule refuses it otherwise; a warning at every session),
and the embedded cluster listens on 127.0.0.1 only (docs/guarantees.md, "Who can run what").

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
import ssl
import sys
import tempfile
from typing import Iterator

from gnnpipe.config.rules import TLS_KEYS, address_fault, plain_past_loopback
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
        security = _security(cfg)
        try:
            client = Client(cfg.address, timeout=cfg.start_timeout_s, set_as_default=False,
                            security=security)
        except (OSError, TimeoutError) as err:  # Dask's CommClosedError is an OSError
            raise EngineError(f"cluster.address {cfg.address}: {_refusal(err, cfg)}") from None
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


def _security(cfg: EngineParams):
    """Dask's ``Security`` for a ``tls://`` address (None for ``tcp://``, after the one-line
    warning that an allowed insecure address past loopback gets): TLS required, the cluster's
    CA, this client's certificate and key. Each file is opened and parsed here first, so a
    missing or wrong one is one line naming its key, not an SSL error from inside Dask."""
    fault = address_fault(cfg)  # the params rule's, for an EngineParams built without it
    if fault:
        raise EngineError(fault)
    if plain_past_loopback(cfg.address):  # allowed by cluster.allow_insecure: said every time
        print(f"gnnpipe: warning: cluster.address {cfg.address} is plain TCP past loopback "
              "(cluster.allow_insecure: true): anyone who reaches that scheduler runs code on "
              "every worker; use tls:// with cluster.tls (docs/scaling.md)", file=sys.stderr)
    if not cfg.address.lower().startswith("tls://"):
        return None
    from distributed import Security

    tls = cfg.tls
    for key in TLS_KEYS:
        path = getattr(tls, key)
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            reason = "cannot be read" if os.path.isfile(path) else "no such file"
            raise EngineError(f"cluster.tls.{key} {path}: {reason} (cluster.address "
                              f"{cfg.address} needs the cluster's CA, this client's "
                              "certificate and its key)")
    try:
        context = ssl.create_default_context(cafile=tls.ca_file)
    except (ssl.SSLError, ValueError) as err:
        raise EngineError(f"cluster.tls.ca_file {tls.ca_file}: not a PEM CA certificate "
                          f"({_ssl_reason(err)})") from None
    try:  # a passphrase callback that gives none: OpenSSL would otherwise prompt on the tty
        context.load_cert_chain(tls.cert_file, tls.key_file, password=lambda: b"")
    except (ssl.SSLError, ValueError) as err:
        raise EngineError(f"cluster.tls.cert_file {tls.cert_file} with cluster.tls.key_file "
                          f"{tls.key_file}: not a PEM certificate and its unencrypted private "
                          f"key ({_ssl_reason(err)})") from None
    return Security(tls_ca_file=tls.ca_file, tls_client_cert=tls.cert_file,
                    tls_client_key=tls.key_file, require_encryption=True)


def _refusal(err: BaseException, cfg: EngineParams) -> str:
    """Why the scheduler at ``cfg.address`` was not reached, from Dask's error and its causes:
    our CA did not verify the scheduler, the scheduler ended the TLS handshake (it did not
    accept our certificate), a TLS scheduler reset a plain connection, or no answer in time
    (Dask retries a refused or silent address until then; a handshake that fails is final)."""
    chain, seen = [], err
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(f"{type(e).__name__}: {e}" for e in chain)
    verify = next((e for e in chain if isinstance(e, ssl.SSLCertVerificationError)), None)
    if verify is not None or "certificate does not match" in text:  # Dask's words for it
        detail = f" ({verify.verify_message})" if verify is not None else ""
        return (f"the scheduler's certificate is not signed by cluster.tls.ca_file "
                f"{cfg.tls.ca_file}{detail}: the scheduler, its workers and this client need "
                "certificates from one CA")
    if isinstance(err, TimeoutError) or str(err).startswith("Timed out"):
        return (f"no Dask scheduler answered within {cfg.start_timeout_s:g} s "
                f"({type(err).__name__})")
    if cfg.address.lower().startswith("tls://") and (
            any(isinstance(e, (ssl.SSLError, ConnectionError)) for e in chain) or "SSL" in text):
        return (f"the scheduler ended the TLS handshake: it did not accept cluster.tls.cert_file "
                f"{cfg.tls.cert_file} (signed by another CA than its --tls-ca-file, or expired)")
    if any(isinstance(e, ConnectionResetError) for e in chain):
        return ("the scheduler reset the connection: a TLS scheduler refuses plain tcp://; use "
                "tls:// with cluster.tls.ca_file, cluster.tls.cert_file and cluster.tls.key_file")
    return f"the connection failed ({_first_line(err)})"


def _ssl_reason(err: BaseException) -> str:
    return getattr(err, "reason", None) or _first_line(err)


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


def fold_blocks(client, fn, calls: list[tuple], combine, **common):
    """``combine`` (a function of two results) folded over ``fn(*call, **common)`` for every
    call (at least one), in call order, as ``run_blocks`` runs them. On Dask each result is
    fetched and released in call order (about the order tasks end), so no worker holds its
    finished tasks' results until the last one ends (lp's sweep histograms: up to 32 bytes a
    proposal, every block); in this process one result at a time is held besides the fold."""
    if not calls:
        raise ValueError("fold_blocks: no calls to fold")
    if client is None:
        return functools.reduce(combine, (fn(*call, **common) for call in calls))
    futures = client.map(functools.partial(fn, **common), *map(list, zip(*calls)), pure=False)
    total = None
    for i, future in enumerate(futures):
        result = future.result()
        total = result if i == 0 else combine(total, result)
        future.release()
        futures[i] = None  # the last reference: Dask forgets the task's result
    return total


@contextlib.contextmanager
def _cluster(cfg: EngineParams, scratch: str, local_cluster) -> Iterator[object]:
    """The embedded ``LocalCluster`` (``cfg``'s workers and limits), closed at exit."""
    try:
        cluster = local_cluster(
            host="127.0.0.1",  # Dask's default too, said here: nothing past loopback reaches it
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
