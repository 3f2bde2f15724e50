from __future__ import annotations

import pytest

from tests.s3 import S3Server, versitygw


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> S3Server:
    """One versitygw for the whole run (it starts in well under a second, but needs no more)."""
    with versitygw(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture
def s3(s3_server: S3Server) -> S3Server:
    """The session's server with a fresh, empty bucket of this test's own."""
    return s3_server.new_bucket()
