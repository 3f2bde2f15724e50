"""Two certificate authorities of their own, each with a server and a client certificate it
signed: the files before and after a rotation (test_server_tls.py, test_tls_reload.py)."""

from __future__ import annotations

import pytest

from tests.certs import Certs, make_certs


@pytest.fixture(scope="module")
def old(tmp_path_factory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("old-ca"))


@pytest.fixture(scope="module")
def new(tmp_path_factory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("new-ca"))
