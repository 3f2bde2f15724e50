from __future__ import annotations

import pytest

from tests.azure import AzureServer, azurite


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory) -> AzureServer:
    """One Azurite for the whole run (node takes a second or two to load it)."""
    with azurite(tmp_path_factory.mktemp("azure")) as server:
        yield server


@pytest.fixture
def azure(azure_server: AzureServer) -> AzureServer:
    """The session's Azurite with a fresh, empty container of this test's own."""
    return azure_server.new_container()
