"""A throwaway certificate authority for TLS tests, made with the machine's `openssl`: a CA,
a server certificate for 127.0.0.1/localhost and a client certificate (mTLS), all signed by it,
plus a second CA that signed nothing the server trusts."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA the server does not trust
    other_client_cert: Path
    other_client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(name: str, cwd: Path) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=cwd,
    )  # fmt: skip


def _signed(name: str, ca: str, extensions: str, cwd: Path) -> None:
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=cwd,
    )  # fmt: skip
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.crt", "-extfile", f"{name}.ext",
        cwd=cwd,
    )  # fmt: skip


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    _ca("ca", directory)
    _ca("other-ca", directory)
    _signed(
        "server",
        "ca",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        directory,
    )
    _signed("client", "ca", "extendedKeyUsage=clientAuth\n", directory)
    _signed("other-client", "other-ca", "extendedKeyUsage=clientAuth\n", directory)
    d = directory
    return Certs(
        d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key",
        d / "other-ca.crt", d / "other-client.crt", d / "other-client.key",
    )  # fmt: skip
