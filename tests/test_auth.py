"""The bearer-token check shared by the OTLP doors and the ConnectorService
(`otel_delta/auth.py`); the doors' answers (401, UNAUTHENTICATED) are tested with the real
transports in tests/transports/test_security.py."""

from __future__ import annotations

import pytest

from otel_delta.auth import BearerToken
from otel_delta.errors import UnauthenticatedError

TOKEN = "s3cret-token-of-some-length"


@pytest.mark.parametrize("value", [f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER  {TOKEN} "])
def test_the_token_is_taken_whatever_the_scheme_case_and_surrounding_spaces(value: str) -> None:
    BearerToken(TOKEN).check(value)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (None, "missing authorization"),
        ("", "missing authorization"),
        (f"Basic {TOKEN}", "Bearer scheme"),
        (TOKEN, "Bearer scheme"),
        ("Bearer wrong", "invalid bearer token"),
        (f"Bearer {TOKEN}x", "invalid bearer token"),
        ("Bearer ", "invalid bearer token"),
        # a Latin-1 byte as aiohttp hands it over: a wrong token, not a crash
        ("Bearer caf\udce9", "invalid bearer token"),
    ],
)
def test_anything_else_is_unauthenticated_and_says_why(value: str | None, says: str) -> None:
    with pytest.raises(UnauthenticatedError, match=says):
        BearerToken(TOKEN).check(value)


def test_a_token_with_bytes_that_are_not_utf8_matches_itself() -> None:
    token = "caf\udce9-and-more-characters"
    BearerToken(token).check(f"Bearer {token}")


def test_grpc_metadata_is_checked_by_its_authorization_entry() -> None:
    token = BearerToken(TOKEN)
    token.check_metadata([("user-agent", "x"), ("authorization", f"Bearer {TOKEN}")])
    token.check_metadata([("authorization", f"Bearer {TOKEN}".encode())])
    with pytest.raises(UnauthenticatedError, match="missing"):
        token.check_metadata([("user-agent", "x")])
    with pytest.raises(UnauthenticatedError, match="missing"):
        token.check_metadata(None)
    with pytest.raises(UnauthenticatedError, match="invalid"):
        token.check_metadata([("authorization", "Bearer nope")])
