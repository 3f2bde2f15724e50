"""The bridge on S3 (tests in this package), and the S3-compatible server they run against:
versitygw (`make s3-server`) on loopback, on a free port; `tests.s3.versitygw` for other tests.

versitygw's posix backend serves a folder: each sub-folder is a bucket, each file below it an
object. It honours conditional writes (`If-None-Match: *` → 412 when the key exists), which is
what delta-rs 1.x commits with on S3 (put-if-absent of `_delta_log/NNN.json`), so concurrent
writers to one table are safe without a lock table or `AWS_S3_ALLOW_UNSAFE_RENAME`.

    with versitygw(tmp_path) as s3:
        DeltaTable(s3.url("lake", "spans"), storage_options=s3.storage_options())
        config.write_text(... + s3.toml())  # [deltalake.storage.options] of deltalake.toml
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import free_port
from tests.tools import versitygw_binary

REGION = "us-east-1"
START_TIMEOUT = 30.0


@dataclass(frozen=True)
class S3Server:
    """A running versitygw: where it answers, its root user's keys, and one bucket."""

    endpoint: str  # http://127.0.0.1:PORT
    bucket: str
    access_key: str
    secret_key: str
    root: Path  # the served folder: root / bucket / key is the object `key`
    log: Path  # the server's stdout and stderr
    region: str = REGION
    gateway: _Gateway | None = dataclasses.field(default=None, repr=False, compare=False)

    def url(self, *parts: str) -> str:
        """s3://bucket/part/part, e.g. a table path."""
        return "/".join([f"s3://{self.bucket}", *parts])

    def storage_options(self) -> dict[str, str]:
        """Object-store options for delta-rs (`storage_options=`), as a user would set them."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",  # the endpoint is plain http://
            # path-style (http://host:port/bucket/key): loopback has no per-bucket host names
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        }

    def toml(self) -> str:
        """The same options as a `[deltalake.storage.options]` table of deltalake.toml."""
        lines = [f"{key} = {json.dumps(value)}" for key, value in self.storage_options().items()]
        return "[deltalake.storage.options]\n" + "\n".join(lines) + "\n"

    def new_bucket(self, name: str | None = None) -> S3Server:
        """The same server with a fresh, empty bucket (a new folder of the served root)."""
        name = name or f"b-{uuid.uuid4().hex[:12]}"
        (self.root / name).mkdir()
        return dataclasses.replace(self, bucket=name)

    @contextmanager
    def down(self) -> Iterator[None]:
        """An outage: the server stopped for the block (connections refused), then started again
        on the same port with the same data. It stops every bucket of this server."""
        assert self.gateway is not None
        self.gateway.stop()
        try:
            yield
        finally:
            self.gateway.start()

    @contextmanager
    def refusing_keys(self) -> Iterator[None]:
        """The server restarted on the same port and data with another root secret for the
        block (every request signed with our keys gets 403), then with ours again."""
        assert self.gateway is not None
        self.gateway.stop()
        ours = self.gateway.env["ROOT_SECRET_KEY"]
        self.gateway.env = {**self.gateway.env, "ROOT_SECRET_KEY": uuid.uuid4().hex}
        self.gateway.start()
        try:
            yield
        finally:
            self.gateway.stop()
            self.gateway.env = {**self.gateway.env, "ROOT_SECRET_KEY": ours}
            self.gateway.start()

    @contextmanager
    def hung(self) -> Iterator[None]:
        """A store that hangs: the server stopped (SIGSTOP) for the block, so connections are
        accepted by the kernel and never answered, then continued (SIGCONT)."""
        assert self.gateway is not None and self.gateway.proc is not None
        self.gateway.proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.gateway.proc.send_signal(signal.SIGCONT)

    def objects(self, *parts: str) -> list[str]:
        """Keys of the objects under bucket/part/part, read from the served folder."""
        base = self.root.joinpath(self.bucket, *parts)
        return sorted(
            str(path.relative_to(self.root / self.bucket))
            for path in base.rglob("*")
            if path.is_file()
        )


def _answers(port: int) -> bool:
    """Any HTTP answer (an anonymous request gets 403) means the S3 API is being served."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", "/")
        return connection.getresponse().status > 0
    except OSError:
        return False
    finally:
        connection.close()


class _Gateway:
    """The versitygw process behind an S3Server: started on a free port, and stopped and
    started again on the same one for an outage."""

    def __init__(self, root: Path, log: Path, access_key: str, secret_key: str) -> None:
        self.binary = versitygw_binary()  # FileNotFoundError naming `make s3-server`
        self.root, self.log = root, log
        self.env = {**os.environ, "ROOT_ACCESS_KEY": access_key, "ROOT_SECRET_KEY": secret_key}
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self) -> None:
        """On the port it had, or on a free one; a free port taken between our probe and its
        bind: another."""
        for _ in range(1 if self.port else 3):
            port = self.port or free_port()
            listen = ["--port", f"127.0.0.1:{port}", "--quiet", "--keep-alive"]
            with self.log.open("ab") as out:
                proc = subprocess.Popen(
                    [str(self.binary), *listen, "posix", str(self.root)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                )
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline and proc.poll() is None:
                if _answers(port):
                    self.proc, self.port = proc, port
                    return
                time.sleep(0.05)
            if proc.poll() is None:  # running, but never answered
                proc.kill()
                proc.wait()
                break
        raise RuntimeError(f"versitygw did not start:\n{self.log.read_text(errors='replace')}")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@contextmanager
def versitygw(directory: Path, bucket: str = "lake") -> Iterator[S3Server]:
    """versitygw serving `directory`/data (created, with an empty bucket `bucket`) on
    127.0.0.1 until the block ends; its log is `directory`/versitygw.log."""
    root = directory / "data"
    (root / bucket).mkdir(parents=True)
    access_key, secret_key = "otel-delta-test", uuid.uuid4().hex
    gateway = _Gateway(root, directory / "versitygw.log", access_key, secret_key)
    gateway.start()
    try:
        yield S3Server(
            endpoint=f"http://127.0.0.1:{gateway.port}",
            bucket=bucket,
            access_key=access_key,
            secret_key=secret_key,
            root=root,
            log=gateway.log,
            gateway=gateway,
        )
    finally:
        gateway.stop()
