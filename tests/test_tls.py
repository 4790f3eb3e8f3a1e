"""A TLS-secured cluster: ``dask scheduler`` / ``dask worker`` with certificates made here.

A private CA and one certificate for 127.0.0.1 (server and client use) are
generated with ``cryptography``; the scheduler and workers require TLS with
client certificates.  Training through such a cluster gives the plain
cluster's model bit for bit, whether the certificates are handed over in a
``Security`` object or through Dask's configuration (as the command line gets
them); a client without a certificate signed by the CA is refused.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import TLSFiles
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from distributed import Client
from distributed.security import Security
from test_engine import letter_arrays, write_parquet

from nsdist.api import evaluate, train
from nsdist.engine.cluster import connect
from nsdist.model import load_model

REPO = Path(__file__).resolve().parents[1]
PARAMS = dict(measure="prbep", solver="2pmb", n_passes=1, random_state=8)


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    os.chmod(path, 0o600)
    return str(path)


def make_certificates(root: Path, name: str) -> TLSFiles:
    """A CA and a certificate for 127.0.0.1 it signs (server and client auth), as PEM files in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return TLSFiles(
        ca=_write(root / "ca.pem", ca.public_bytes(pem)),
        cert=_write(root / "cert.pem", cert.public_bytes(pem)),
        key=_write(root / "key.pem", key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption())))


@pytest.fixture(scope="module")
def letter_8(tmp_path_factory) -> str:
    X, y = letter_arrays()
    return write_parquet(tmp_path_factory.mktemp("letter8"), X[:8000], y[:8000], rows_per_file=1000)


@pytest.fixture(scope="module")
def tls_cluster(dask_processes, tmp_path_factory):
    return dask_processes(2, tls=make_certificates(tmp_path_factory.mktemp("certs"), "nsdist test"))


@pytest.fixture(scope="module")
def plain_model(dask_client, letter_8):
    return train(letter_8, client=dask_client, standardize=False, **PARAMS)


def test_training_over_tls_gives_the_plain_clusters_model(tls_cluster, plain_model, dask_client, letter_8,
                                                          reliability):
    """``train`` / ``evaluate`` with a ``Client(tls://..., security=Security(...))`` equal the plain run."""
    assert tls_cluster.address.startswith("tls://")
    with tls_cluster.client() as client:
        secured = train(letter_8, client=client, standardize=False, **PARAMS)
        measures = evaluate(secured, letter_8, client=client)
        assert all(address.startswith("tls://") for address in client.scheduler_info()["workers"])
    reliability("safety", "train and evaluate on a TLS cluster (client certificates required)", rejected=False)
    np.testing.assert_array_equal(secured.coef, plain_model.coef)
    assert secured.intercept == plain_model.intercept
    assert measures == evaluate(plain_model, letter_8, client=dask_client)


def test_connect_passes_the_security_settings(tls_cluster, plain_model, letter_8):
    """``nsdist.engine.cluster.connect(address, security=...)`` opens a client of the TLS cluster."""
    with connect(tls_cluster.address, security=tls_cluster.security()) as client:
        secured = train(letter_8, client=client, standardize=False, **PARAMS)
    np.testing.assert_array_equal(secured.coef, plain_model.coef)


def test_command_line_reads_tls_from_the_dask_configuration(tls_cluster, plain_model, letter_8, tmp_path,
                                                            reliability):
    """``nsdist train --scheduler tls://...`` with the certificates in Dask's configuration (here its
    environment variables) trains the same model; without them it is refused, on one line."""
    tls = tls_cluster.tls
    args = [sys.executable, "-m", "nsdist", "train", letter_8, "--measure", "prbep", "--solver", "2pmb",
            "--n-passes", "1", "--random-state", "8", "--set", "dataset.standardize=false", "--no-progress",
            "--scheduler", tls_cluster.address]
    config = {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": tls.ca, "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": tls.cert,
              "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": tls.key, "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "true"}
    ok = subprocess.run([*args, "--out", str(tmp_path / "ok")], cwd=REPO, capture_output=True, text=True, timeout=300,
                        env={**os.environ, **config})
    assert ok.returncode == 0, ok.stderr
    np.testing.assert_array_equal(load_model(str(tmp_path / "ok" / "model")).coef, plain_model.coef)
    refused = subprocess.run([*args, "--out", str(tmp_path / "refused")], cwd=REPO, capture_output=True, text=True,
                             timeout=300, env={**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s"})
    lines = [line for line in refused.stderr.splitlines() if line.startswith("nsdist train: ")]
    reliability("safety", "`nsdist train --scheduler tls://...` without the certificates", rejected=True,
                exit_code=refused.returncode, message=lines[0] if lines else refused.stderr)
    assert refused.returncode == 1 and len(lines) == 1
    assert f"{tls_cluster.address} is a TLS scheduler but no client certificate is configured" in lines[0]
    assert not (tmp_path / "refused" / "model").exists()


def test_connect_without_a_certificate_says_how_to_give_one(tls_cluster, letter_8):
    """A ``tls://`` address and no certificate configured: a ``ValueError`` says how to give one."""
    with pytest.raises(ValueError, match="is a TLS scheduler but no client certificate is configured"):
        train(letter_8, client=tls_cluster.address, **PARAMS)


def handshake(address: str, ca: str, cert: TLSFiles | None) -> bytes:
    """Open a TLS connection to ``address`` trusting ``ca`` (showing ``cert``, if any) and read from it."""
    host, port = address.removeprefix("tls://").split(":")
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False
    if cert is not None:
        ctx.load_cert_chain(cert.cert, cert.key)
    with socket.create_connection((host, int(port)), timeout=10) as raw, ctx.wrap_socket(raw) as conn:
        conn.sendall(b"\0" * 8)   # TLS 1.3: a refused client certificate is reported at the first read
        return conn.recv(1)


@pytest.mark.parametrize("who", ["no certificate", "certificate of another CA", "plain tcp"])
def test_clients_without_the_clusters_certificate_are_refused(tls_cluster, tmp_path, who, reliability):
    """The scheduler accepts no client that cannot show a certificate signed by the cluster's CA:
    the TLS handshake fails (no or a foreign certificate), a plain TCP client gets no answer."""
    tls = tls_cluster.tls
    assert handshake(tls_cluster.address, tls.ca, tls) != b""       # the cluster's own certificate is answered
    with tls_cluster.client() as trusted:
        clients = trusted.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.clients))
        t0 = time.monotonic()
        if who == "plain tcp":
            with pytest.raises((OSError, TimeoutError)):
                Client(tls_cluster.address.replace("tls://", "tcp://"), timeout="3s", set_as_default=False)
        else:
            stranger = make_certificates(tmp_path / "stranger", "stranger") if who != "no certificate" else None
            with pytest.raises((ssl.SSLError, ConnectionError)):
                handshake(tls_cluster.address, tls.ca, stranger)
            if stranger is not None:
                with pytest.raises((OSError, TimeoutError)):
                    Client(tls_cluster.address, timeout="3s", set_as_default=False,
                           security=Security(tls_ca_file=tls.ca, tls_client_cert=stranger.cert,
                                             tls_client_key=stranger.key, require_encryption=True))
        reliability("safety", f"a client with {who} to the TLS scheduler", rejected=True)
        assert time.monotonic() - t0 < 30
        assert trusted.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.clients)) == clients
