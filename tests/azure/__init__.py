"""The bridge on Azure Blob Storage (tests in this package), and the emulator they run against:
Azurite's blob service (`make azure-server`) on loopback, on a free port.

delta-rs reaches it as it reaches any Azure account whose endpoint is not the default one: the
account's name and key, its endpoint (Azurite serves accounts path-style, so the endpoint ends
in the account's name) and plain http allowed, all in the storage options. Azurite honours
`If-None-Match: *` on a blob PUT (409 BlobAlreadyExists when the blob exists), which is what
delta-rs commits `_delta_log/NNN.json` with on Azure, so writers to one table are safe there.

    with azurite(tmp_path) as azure:
        DeltaTable(azure.url("lake", "spans"), storage_options=azure.storage_options())
        config.write_text(... + azure.toml())  # [deltalake.storage.options] of deltalake.toml
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from tests.helpers import free_port
from tests.tools import azurite_blob

# Azurite's development account: the same name and key in every Azurite, published by Microsoft
# for the emulator (so, no secret); Azurite accepts only these unless told otherwise.
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
START_TIMEOUT = 60.0  # node loading Azurite on a busy 2-core machine


@dataclass(frozen=True)
class AzureServer:
    """A running Azurite blob service: where it answers, and one container of its account."""

    port: int
    container: str
    log: Path  # Azurite's stdout and stderr (one line per request)
    account: str = ACCOUNT
    account_key: str = ACCOUNT_KEY

    @property
    def endpoint(self) -> str:
        """The account's blob endpoint, path-style: http://127.0.0.1:PORT/ACCOUNT."""
        return f"http://127.0.0.1:{self.port}/{self.account}"

    def url(self, *parts: str) -> str:
        """az://container/part/part, e.g. a table path."""
        return "/".join([f"az://{self.container}", *parts])

    def storage_options(self) -> dict[str, str]:
        """Object-store options for delta-rs (`storage_options=`), as a user would set them."""
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": self.account,
            "AZURE_STORAGE_ACCOUNT_KEY": self.account_key,
            "AZURE_STORAGE_ENDPOINT": self.endpoint,
            "AZURE_ALLOW_HTTP": "true",  # the endpoint is plain http://
        }

    def toml(self) -> str:
        """The same options as a `[deltalake.storage.options]` table of deltalake.toml."""
        lines = [f"{key} = {json.dumps(value)}" for key, value in self.storage_options().items()]
        return "[deltalake.storage.options]\n" + "\n".join(lines) + "\n"

    def filesystem(self) -> pafs.AzureFileSystem:
        """pyarrow's Azure filesystem on the same account (for what delta-rs has no call for:
        making a container, listing its blobs)."""
        authority = f"127.0.0.1:{self.port}"
        return pafs.AzureFileSystem(
            account_name=self.account,
            account_key=self.account_key,
            blob_storage_authority=authority,
            blob_storage_scheme="http",
            dfs_storage_authority=authority,
            dfs_storage_scheme="http",
        )

    def new_container(self, name: str | None = None) -> AzureServer:
        """The same server with a fresh, empty container."""
        name = name or f"c-{uuid.uuid4().hex[:12]}"
        self.filesystem().create_dir(name)
        return dataclasses.replace(self, container=name)

    def objects(self, *parts: str) -> list[str]:
        """Names of the blobs under container/part/part."""
        base = "/".join([self.container, *parts])
        infos = self.filesystem().get_file_info(pafs.FileSelector(base, recursive=True))
        prefix = f"{self.container}/"
        return sorted(
            info.path.removeprefix(prefix) for info in infos if info.type == pafs.FileType.File
        )


def _answers(port: int) -> bool:
    """Any HTTP answer (an anonymous request gets 403) means the blob API is being served."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", f"/{ACCOUNT}?comp=list")
        return connection.getresponse().status > 0
    except OSError:
        return False
    finally:
        connection.close()


def _start(binary: Path, workspace: Path, log: Path) -> tuple[subprocess.Popen, int]:
    """azurite-blob on a free loopback port; a port taken between our probe and its bind:
    another."""
    for _ in range(3):
        port = free_port()
        argv = [
            str(binary),
            *("--blobHost", "127.0.0.1", "--blobPort", str(port)),
            *("--location", str(workspace)),
            "--disableTelemetry",  # Azurite reports usage to Microsoft unless told not to
            # pyarrow's Azure SDK (filesystem()) sends a newer API version than Azurite knows;
            # delta-rs's (object_store's 2023-11-03) is one it knows, so this changes nothing there
            "--skipApiVersionCheck",
        ]
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            if _answers(port):
                return proc, port
            time.sleep(0.1)
        if proc.poll() is None:  # running, but never answered
            _stop(proc)
            break
    raise RuntimeError(f"Azurite did not start:\n{log.read_text(errors='replace')}")


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def azurite(directory: Path, container: str = "lake") -> Iterator[AzureServer]:
    """Azurite's blob service keeping its data in `directory`/data, with an empty container
    `container`, on 127.0.0.1 until the block ends; its log is `directory`/azurite.log."""
    binary = azurite_blob()  # FileNotFoundError naming `make azure-server`
    workspace = directory / "data"
    workspace.mkdir(parents=True)
    proc, port = _start(binary, workspace, directory / "azurite.log")
    try:
        server = AzureServer(port=port, container="", log=directory / "azurite.log")
        yield server.new_container(container)
    finally:
        _stop(proc)
