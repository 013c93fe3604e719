"""cluster.address tls:// with cluster.tls (gnnpipe/runtime/engine.py, rules.py address_fault):
a TLS scheduler and worker on 127.0.0.1 with certificates made here run a data-path stage;
clients without a certificate, with one from another CA, or trusting another CA are refused
in bounded time with one line; bad TLS files are named; plain tcp:// past loopback is refused
at load time unless cluster.allow_insecure (then each session warns); the embedded
LocalCluster listens on loopback only."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import socket
import ssl
import time
from pathlib import Path

import pytest
import yaml

from gnnpipe.config import ParamsError, params_from_dict
from gnnpipe.config.schema import EngineParams, TlsParams
from gnnpipe.runtime import engine

WAIT_S = 2.0  # cluster.start_timeout_s of the refused clients
BOUND_S = 15.0  # what a refusal may take at most (Dask retries a silent scheduler until WAIT_S)


# ------------------------------------------------------------------------------ certificates
def _name(common_name: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(folder: Path, stem: str, issuer=None) -> tuple:
    """``stem.pem`` and ``stem.key`` (mode 600): a CA's self-signed certificate (``issuer``
    None) or a certificate signed by ``issuer`` = (cert, key) for 127.0.0.1 and localhost,
    usable by a server and a client. Returns (cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    signer_cert, signer_key = issuer or (None, key)
    builder = (x509.CertificateBuilder().subject_name(_name(stem))
               .issuer_name(signer_cert.subject if issuer else _name(stem))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None),
                              critical=True))
    if issuer is None:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False).add_extension(x509.ExtendedKeyUsage([
                ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    cert = builder.sign(signer_key, hashes.SHA256())
    (folder / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = folder / f"{stem}.key"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """The cluster's CA (ca), the scheduler's and workers' certificate (node), gnnpipe's client
    certificate (client); another CA (rogue) and a certificate it signed (intruder)."""
    folder = tmp_path_factory.mktemp("pki")
    ca = _issue(folder, "ca")
    _issue(folder, "node", ca)
    _issue(folder, "client", ca)
    _issue(folder, "intruder", _issue(folder, "rogue"))
    return folder


def _tls(pki: Path, ca: str = "ca", cert: str = "client", key: str | None = None) -> TlsParams:
    return TlsParams(ca_file=str(pki / f"{ca}.pem"), cert_file=str(pki / f"{cert}.pem"),
                     key_file=str(pki / f"{key or cert}.key"))


@pytest.fixture(scope="module")
def tls_cluster(pki):
    """A scheduler and one worker process on 127.0.0.1 that speak TLS only and require a
    certificate signed by the cluster's CA from every peer (what `dask scheduler --tls-ca-file
    ca.pem --tls-cert node.pem --tls-key node.key` and the same `dask worker` flags set up)."""
    from distributed import LocalCluster, Security

    node = {f"tls_{role}_{part}": str(pki / f"node.{ext}") for role in ("scheduler", "worker",
                                                                         "client")
            for part, ext in (("cert", "pem"), ("key", "key"))}
    security = Security(tls_ca_file=str(pki / "ca.pem"), require_encryption=True, **node)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, protocol="tls://",
                      host="127.0.0.1", security=security, memory_limit="512MiB",
                      dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                      silence_logs=logging.ERROR) as cluster:
        yield cluster


def _refused(cfg: EngineParams) -> str:
    """The one-line EngineError that opening a session with ``cfg`` raises, within BOUND_S."""
    started = time.monotonic()
    with pytest.raises(engine.EngineError) as err:
        with engine.session(cfg):
            pass
    assert time.monotonic() - started < BOUND_S
    message = str(err.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------- the cluster
def test_a_data_path_stage_runs_on_the_tls_cluster(tls_cluster, pki, tmp_path, monkeypatch,
                                                   capsys):
    """analyze through `gnnpipe analyze` with cluster.address tls:// and cluster.tls from the
    params file: the local engine's bytes, computed by the TLS cluster's worker; with another
    CA's certificate the stage fails with one line on stderr."""
    from gnnpipe.cli import main

    assert tls_cluster.scheduler_address.startswith("tls://127.0.0.1:")
    monkeypatch.chdir(tmp_path)
    params = {"dataset": {"synthetic": {"num_nodes": 300, "num_features": 4, "num_classes": 3}},
              "analyze": {"curvature": {"sample_edges": 60}}}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    assert main(["prepare"]) == 0 and main(["split"]) == 0 and main(["analyze"]) == 0
    outputs = [Path("metrics/graph.json"), Path("metrics/degree_hist.csv")]
    local = [p.read_bytes() for p in outputs]
    for path in outputs:
        path.unlink()
    tls = _tls(pki)
    params["cluster"] = {"engine": "dask", "address": tls_cluster.scheduler_address,
                         "tls": {"ca_file": tls.ca_file, "cert_file": tls.cert_file,
                                 "key_file": tls.key_file}}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    before = tls_cluster.scheduler.transition_counter
    assert main(["analyze"]) == 0
    assert [p.read_bytes() for p in outputs] == local
    assert tls_cluster.scheduler.transition_counter > before  # its tasks went through the cluster
    workers = tls_cluster.scheduler_info["workers"]
    assert workers and all(address.startswith("tls://127.0.0.1:") for address in workers)
    capsys.readouterr()
    params["cluster"]["tls"]["cert_file"] = str(pki / "intruder.pem")
    params["cluster"]["tls"]["key_file"] = str(pki / "intruder.key")
    Path("params.yaml").write_text(yaml.safe_dump(params))
    assert main(["analyze"]) == 1
    assert capsys.readouterr().err == (
        f"gnnpipe analyze: error: cluster.address {tls_cluster.scheduler_address}: the scheduler "
        f"ended the TLS handshake: it did not accept cluster.tls.cert_file {pki / 'intruder.pem'} "
        "(signed by another CA than its --tls-ca-file, or expired)\n")


def test_a_certificate_from_another_ca_is_refused_both_ways(tls_cluster, pki):
    """The scheduler ends the handshake of a client whose certificate its CA did not sign; a
    client that trusts another CA refuses the scheduler's certificate."""
    address = tls_cluster.scheduler_address
    message = _refused(EngineParams(engine="dask", address=address, start_timeout_s=WAIT_S,
                                    tls=_tls(pki, cert="intruder")))
    assert message.startswith(f"cluster.address {address}: the scheduler ended the TLS "
                              f"handshake: it did not accept cluster.tls.cert_file "
                              f"{pki / 'intruder.pem'}"), message
    message = _refused(EngineParams(engine="dask", address=address, start_timeout_s=WAIT_S,
                                    tls=_tls(pki, ca="rogue", cert="intruder")))
    assert message.startswith(f"cluster.address {address}: the scheduler's certificate is not "
                              f"signed by cluster.tls.ca_file {pki / 'rogue.pem'}"), message


def test_a_client_without_a_certificate_is_refused(tls_cluster, pki):
    """gnnpipe over plain tcp:// to the TLS port (loopback, so the rules allow it): one line
    that points at tls://. And a bare TLS client that trusts the CA but shows no certificate
    gets no further than the handshake: the scheduler itself demands one."""
    address = tls_cluster.scheduler_address
    plain = address.replace("tls://", "tcp://")
    message = _refused(EngineParams(engine="dask", address=plain, start_timeout_s=WAIT_S))
    assert message.startswith(f"cluster.address {plain}: the scheduler reset the connection: a "
                              "TLS scheduler refuses plain tcp://"), message
    host, port = address.removeprefix("tls://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    context.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        try:  # TLS 1.3: the refusal may come after the handshake, at the first read
            with context.wrap_socket(raw) as conn:
                conn.sendall(b"\0" * 8)
                refused = conn.recv(8) == b""  # closed (accepted: it waits for more, times out)
        except (ssl.SSLError, ConnectionError):
            refused = True
    assert refused


def test_a_tls_address_where_nothing_listens_is_no_answer_not_a_refusal(pki):
    """Dask retries a refused connection until the wait ends: that is no scheduler, not a
    certificate refused (the handshake errors above are final at once)."""
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    message = _refused(EngineParams(engine="dask", address=f"tls://127.0.0.1:{port}",
                                    start_timeout_s=0.5, tls=_tls(pki)))
    assert message == (f"cluster.address tls://127.0.0.1:{port}: no Dask scheduler answered "
                       "within 0.5 s (OSError)")


def test_missing_or_wrong_tls_files_are_one_line_naming_the_key(pki, tmp_path):
    """Checked before connecting (no scheduler needed: the address is never dialled)."""
    address = "tls://127.0.0.1:9"

    def fault(tls: TlsParams) -> str:
        return _refused(EngineParams(engine="dask", address=address, start_timeout_s=WAIT_S,
                                     tls=tls))

    good = _tls(pki)
    absent = str(tmp_path / "absent.pem")
    assert fault(TlsParams(absent, good.cert_file, good.key_file)) == \
        f"cluster.tls.ca_file {absent}: no such file (cluster.address {address} needs the " \
        "cluster's CA, this client's certificate and its key)"
    assert fault(TlsParams(good.ca_file, good.cert_file, absent)).startswith(
        f"cluster.tls.key_file {absent}: no such file")
    assert fault(TlsParams(good.key_file, good.cert_file, good.key_file)).startswith(
        f"cluster.tls.ca_file {good.key_file}: not a PEM CA certificate")
    message = fault(_tls(pki, cert="client", key="intruder"))  # another certificate's key
    assert message.startswith(f"cluster.tls.cert_file {good.cert_file} with cluster.tls.key_file "
                              f"{pki / 'intruder.key'}: not a PEM certificate and its "
                              "unencrypted private key (KEY_VALUES_MISMATCH)"), message
    # built without the params rules: the rule's line all the same
    assert fault(TlsParams()).startswith(f"cluster.address='{address}' is TLS and needs "
                                         "cluster.tls.ca_file")


# --------------------------------------------------------------------------- the params rule
@pytest.mark.parametrize("address", ["tcp://10.0.0.5:8786", "10.0.0.5:8786", "tcp://host0:8786",
                                     "tcp://0.0.0.0:8786", "tcp://[2001:db8::1]:8786"])
def test_plain_tcp_past_loopback_is_refused_at_load_time(address):
    with pytest.raises(ParamsError) as err:
        params_from_dict({"cluster": {"engine": "dask", "address": address}})
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"cluster.address={address!r} is plain TCP past loopback")
    for key in ("cluster.tls.ca_file", "cluster.tls.cert_file", "cluster.tls.key_file",
                "cluster.allow_insecure: true"):
        assert key in message


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "127.0.0.1:8786",
                                     "tcp://127.8.9.10:8786", "tcp://localhost:8786",
                                     "tcp://[::1]:8786", ""])
def test_loopback_and_the_embedded_cluster_need_no_tls(address):
    params = params_from_dict({"cluster": {"engine": "dask", "address": address}})
    assert params.cluster.address == address


@pytest.mark.parametrize("cluster, message", [
    ({"address": "tls://host0:8786"}, r"cluster.address='tls://host0:8786' is TLS and needs "
     r"cluster.tls.ca_file, cluster.tls.cert_file and cluster.tls.key_file .*; none is set$"),
    ({"address": "tls://host0:8786", "tls": {"ca_file": "ca.pem", "cert_file": "c.pem"}},
     r"; cluster.tls.key_file unset$"),
    ({"address": "tcp://127.0.0.1:8786", "tls": {"ca_file": "ca.pem"}},
     r"cluster.tls is set but cluster.address='tcp://127.0.0.1:8786' is plain tcp://"),
    ({"address": "ucx://127.0.0.1:8786"}, r"not ucx://$"),
    ({"address": "tls://host0:8786", "tls": {"ca_file": "ca.pem", "cert_file": "c.pem",
                                             "key_file": "-----BEGIN PRIVATE KEY-----\nMIG"}},
     r"cluster.tls.key_file holds PEM text: give the path of its file"),
])
def test_tls_settings_are_whole_and_paths(cluster, message):
    with pytest.raises(ParamsError, match=message) as err:
        params_from_dict({"cluster": {"engine": "dask", **cluster}})
    assert "\n" not in str(err.value)


def test_the_local_engine_ignores_the_address():
    params = params_from_dict({"cluster": {"address": "tcp://10.0.0.5:8786"}})
    assert params.cluster.engine == "local"


def test_allow_insecure_lets_the_address_through_with_a_warning_at_every_session(capsys):
    """The stage goes on to dial the scheduler (none answers at this documentation-only
    address, so the session ends with the usual bounded one line) after one warning line."""
    raw = {"cluster": {"engine": "dask", "address": "tcp://192.0.2.1:8786",
                       "allow_insecure": True, "start_timeout_s": 0.5}}
    cfg = params_from_dict(raw).cluster
    for _ in range(2):
        message = _refused(cfg)
        assert message.startswith("cluster.address tcp://192.0.2.1:8786: no Dask scheduler "
                                  "answered within 0.5 s"), message
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["gnnpipe: warning: cluster.address tcp://192.0.2.1:8786 is plain TCP past "
                     "loopback (cluster.allow_insecure: true): anyone who reaches that scheduler "
                     "runs code on every worker; use tls:// with cluster.tls "
                     "(docs/scaling.md)"] * 2


# ------------------------------------------------------------------ the embedded LocalCluster
def _listening(pids: set[int]) -> list[str]:
    """The addresses that ``pids`` hold listening TCP sockets on (Linux /proc)."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(cols[1].split(":")[0])  # 32-bit words in host (little) order
            found.append(str(ipaddress.ip_address(b"".join(
                raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))))
    return found


def _descendants(pid: int) -> set[int]:
    found, frontier = {pid}, [pid]
    while frontier:
        for task in Path(f"/proc/{frontier.pop()}/task").glob("*"):
            try:
                kids = {int(k) for k in (task / "children").read_text().split()}
            except OSError:
                continue
            frontier.extend(kids - found)
            found |= kids
    return found


def test_the_embedded_cluster_listens_on_loopback_only():
    """Scheduler, nanny and worker: every listening socket of this process and its children
    (the LocalCluster's worker processes) is on 127.0.0.1 while the session runs."""
    with engine.session(EngineParams(engine="dask", workers=1, memory_limit="256MiB")) as client:
        info = client.scheduler_info()
        addresses = [info["address"], *info["workers"],
                     *(w["nanny"] for w in info["workers"].values())]
        assert all(a.startswith("tcp://127.0.0.1:") for a in addresses), addresses
        listening = _listening(_descendants(os.getpid()))
        assert len(listening) >= 3  # the scheduler's, the nanny's and the worker's at least
        assert all(ipaddress.ip_address(a).is_loopback for a in listening), listening
