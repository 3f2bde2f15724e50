"""Server TLS for both OTLP transports from `[receiver.tls]`, and for the ConnectorService
from `[connector_service.tls]`; mTLS when a client CA is set.

Files are read once at start: a missing or unreadable file, or a key that does not match its
certificate, is a ConfigError naming the key, not a server that fails every handshake.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc

from otel_delta.config import TlsSettings
from otel_delta.errors import ConfigError

RECEIVER = "receiver.tls"  # the section a ConfigError names
# TLS 1.2 suites: forward secrecy and AEAD only, as gRPC's own list (Python's default also
# takes CBC suites, which OTLP/HTTP then accepted and OTLP/gRPC did not); TLS 1.3 has only these
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def _read(path: str, key: str, section: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{section}.{key}: {exc.strerror}: {path}") from None


def grpc_credentials(tls: TlsSettings, section: str = RECEIVER) -> grpc.ServerCredentials:
    """Credentials for `add_secure_port`; checks the files through `ssl_context` first.
    `section` names the settings in a ConfigError."""
    ssl_context(tls, section)  # one clear error for a bad pair, before grpc's own opaque one
    ca = _read(tls.client_ca_file, "client_ca_file", section) if tls.client_ca_file else None
    return grpc.ssl_server_credentials(
        [
            (
                _read(tls.key_file, "key_file", section),
                _read(tls.cert_file, "cert_file", section),
            )
        ],
        root_certificates=ca,
        require_client_auth=ca is not None,
    )


def ssl_context(tls: TlsSettings, section: str = RECEIVER) -> ssl.SSLContext:
    """The server-side SSLContext of the HTTP transport (TLS 1.2 or newer, AEAD ciphers)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    for key in ("cert_file", "key_file"):
        _read(getattr(tls, key), key, section)
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"{section}: cannot use cert_file {tls.cert_file} with key_file "
            f"{tls.key_file}: {exc.reason or exc}"
        ) from None
    if tls.client_ca_file:
        _read(tls.client_ca_file, "client_ca_file", section)
        try:
            context.load_verify_locations(tls.client_ca_file)
        except ssl.SSLError as exc:
            raise ConfigError(f"{section}.client_ca_file: {exc.reason or exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context
