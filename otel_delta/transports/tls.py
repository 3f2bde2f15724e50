"""Server TLS for both OTLP transports from `[receiver.tls]`, and for the ConnectorService
from `[connector_service.tls]`; mTLS when a client CA is set.

Files are read at start: a missing or unreadable file, or a key that does not match its
certificate, is a ConfigError naming the key, not a server that fails every handshake. Then,
with `reload_interval_seconds`, they are read again at a handshake at most once per interval
(`ServerTls`): cert-manager rotates a Kubernetes Secret in place, and a bridge that kept the
old certificate would fail every handshake once it expired. A change that does not load keeps
the certificate in use, with one WARNING, so a rotation half done never stops the server.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from otel_delta.config import TlsSettings
from otel_delta.errors import ConfigError

log = logging.getLogger(__name__)

RECEIVER = "receiver.tls"  # the section a ConfigError names
# TLS 1.2 suites: forward secrecy and AEAD only, as gRPC's own list (Python's default also
# takes CBC suites, which OTLP/HTTP then accepted and OTLP/gRPC did not); TLS 1.3 has only these
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
FILES = ("cert_file", "key_file", "client_ca_file")
# a start whose files change under it this many times in a row gives up (a writer that loops)
START_READS = 3


def read_file(path: str | Path, key: str, section: str) -> bytes:
    """A TLS file's bytes, or one ConfigError naming its setting (`section.key`) and why."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{section}.{key}: {exc.strerror}: {path}") from None


@dataclass(frozen=True)
class Loaded:
    """One good set of files: their contents (cert, key, CA; b"" when unset) and the
    SSLContext made of them."""

    contents: tuple[bytes, bytes, bytes] = field(repr=False)  # the key: never in a message
    context: ssl.SSLContext


class ServerTls:
    """The certificate, key and client CA of one TLS section, as served now, for every server
    of that section (the receiver's gRPC and HTTP share one: one WARNING per bad change).

    `current()` is asked at each handshake. Once `reload_interval_seconds` has passed since
    it last looked, it reads the files again (a few KB: reading them is how a change is seen,
    whatever way it was written, including Kubernetes' swap of the `..data` symlink). Changed
    files that load are served from then on (one INFO line); changed files that do not (a key
    not matching its certificate, a file half written or gone) keep the ones in use, with one
    WARNING line naming the setting until they change again. It never raises: a handshake
    must not fail because of our reading."""

    def __init__(
        self,
        tls: TlsSettings,
        section: str = RECEIVER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tls = tls
        self.section = section
        self._clock = clock
        self._lock = threading.Lock()  # one handshake looks at a time; the others go on
        self._refused: tuple[bytes | str, ...] | None = None  # the files of the last WARNING
        for _ in range(START_READS):
            loaded = self._load()  # a bad file at start: the ConfigError
            if loaded is not None:
                break
        else:
            raise ConfigError(f"{section}: the files kept changing while they were read")
        self._loaded: Loaded = loaded
        self._looked = clock()

    @property
    def reloads(self) -> bool:
        return self.tls.reload_interval_seconds > 0

    @property
    def requires_client_certificate(self) -> bool:
        return bool(self.tls.client_ca_file)

    def current(self) -> Loaded:
        """What this handshake is to serve: the files loaded last, looked at again first if
        the interval has passed since the last look."""
        interval = self.tls.reload_interval_seconds
        if not interval or self._clock() - self._looked < interval:
            return self._loaded
        if not self._lock.acquire(blocking=False):  # another handshake is looking
            return self._loaded
        try:
            self._looked = self._clock()
            self._look()
        except Exception as exc:  # not expected: but a handshake must not fail for it
            log.warning("%s: could not read the files again (%r)", self.section, exc)
        finally:
            self._lock.release()
        return self._loaded

    def _look(self) -> None:
        snapshot = self._snapshot()
        if snapshot == self._loaded.contents or snapshot == self._refused:
            return
        try:
            loaded = self._load()
        except ConfigError as exc:
            self._refused = snapshot
            log.warning(
                "%s (the files changed but do not load: still serving those loaded before, "
                "until they change again)",
                str(exc).removeprefix(ConfigError.PREFIX),
            )
            return
        if loaded is None:  # being written as we read: look again at the next interval
            return
        self._loaded = loaded
        self._refused = None
        log.info(
            "%s: the files changed; serving the certificate of %s from now on",
            self.section,
            self.tls.cert_file,
        )

    def _snapshot(self) -> tuple[bytes | str, ...]:
        """Each file's bytes (b"" when unset), or the reason it cannot be read."""
        contents: list[bytes | str] = []
        for key in FILES:
            path = getattr(self.tls, key)
            try:
                contents.append(Path(path).read_bytes() if path else b"")
            except OSError as exc:
                contents.append(str(exc.strerror))
        return tuple(contents)

    def _load(self) -> Loaded | None:
        """The files as a Loaded (ConfigError if they do not load); None if they changed while
        read, so that the bytes gRPC is given are those the SSLContext checked."""
        before = self._snapshot()
        context = ssl_context(self.tls, self.section)
        after = self._snapshot()
        if before != after or not all(isinstance(content, bytes) for content in after):
            return None
        cert, key, ca = after
        assert isinstance(cert, bytes) and isinstance(key, bytes) and isinstance(ca, bytes)
        return Loaded((cert, key, ca), context)


def _configuration(loaded: Loaded) -> grpc.ServerCertificateConfiguration:
    cert, key, ca = loaded.contents
    return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca or None)


def grpc_credentials(files: ServerTls) -> grpc.ServerCredentials:
    """Credentials for `add_secure_port`. Reloading, gRPC asks at each new connection for
    a configuration to replace the one in use (None: keep it)."""
    served = files.current()
    if not files.reloads:
        cert, key, ca = served.contents
        return grpc.ssl_server_credentials(
            [(key, cert)],
            root_certificates=ca or None,
            require_client_auth=files.requires_client_certificate,
        )

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        nonlocal served
        loaded = files.current()
        if loaded is served:
            return None
        served = loaded
        return _configuration(loaded)

    return grpc.dynamic_ssl_server_credentials(
        _configuration(served), fetch, files.requires_client_certificate
    )


def http_ssl_context(files: ServerTls) -> ssl.SSLContext:
    """The SSLContext of the HTTP server. Reloading, each handshake switches to the freshest
    context (made whole of the current files: a new client CA replaces the old one) from its
    SNI callback, which OpenSSL calls for every ClientHello, with or without a server name."""
    context = files.current().context
    if files.reloads:

        def freshest(connection: ssl.SSLObject, _name: str | None, own: ssl.SSLContext) -> None:
            fresh = files.current().context
            if fresh is not own:
                connection.context = fresh

        context.sni_callback = freshest
    return context


def ssl_context(tls: TlsSettings, section: str = RECEIVER) -> ssl.SSLContext:
    """A server-side SSLContext of the files (TLS 1.2 or newer, AEAD ciphers)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    for key in ("cert_file", "key_file"):
        read_file(getattr(tls, key), key, section)
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"{section}: cannot use cert_file {tls.cert_file} with key_file "
            f"{tls.key_file}: {exc.reason or exc}"
        ) from None
    if tls.client_ca_file:
        read_file(tls.client_ca_file, "client_ca_file", section)
        try:
            context.load_verify_locations(tls.client_ca_file)
        except ssl.SSLError as exc:
            raise ConfigError(f"{section}.client_ca_file: {exc.reason or exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context
