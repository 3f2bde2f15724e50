"""Bearer-token authentication, one check for every door: the OTLP transports
(`[receiver.auth]`: the gRPC `authorization` metadata or the HTTP `Authorization` header, as
the Collector's `bearertokenauth` extension sends it) and the ConnectorService."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from otel_delta.errors import UnauthenticatedError

SCHEME = "bearer "


def _bytes(text: str) -> bytes:
    """`text` as the bytes it came as. aiohttp (and os.environ) hand over bytes that are not
    UTF-8 as lone surrogates, which a plain encode() refuses: a header with a Latin-1 byte,
    which any client may send, was a 500 and an ERROR traceback instead of a wrong token."""
    return text.encode("utf-8", "surrogateescape")


class BearerToken:
    """Checks an `authorization` value against the configured token, in constant time."""

    def __init__(self, token: str) -> None:
        self._expected = _bytes(token)

    def check_metadata(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> None:
        """`check` the `authorization` entry of gRPC invocation metadata (sync or aio)."""
        for key, value in metadata or ():
            if key == "authorization":
                return self.check(value if isinstance(value, str) else value.decode())
        return self.check(None)

    def check(self, authorization: str | None) -> None:
        """Raises UnauthenticatedError unless `authorization` is `Bearer <the token>`."""
        if not authorization:
            raise UnauthenticatedError("missing authorization: send 'Bearer <token>'")
        if authorization[: len(SCHEME)].lower() != SCHEME:
            raise UnauthenticatedError("authorization must use the Bearer scheme")
        given = _bytes(authorization[len(SCHEME) :].strip())
        if not hmac.compare_digest(given, self._expected):
            raise UnauthenticatedError("invalid bearer token")
