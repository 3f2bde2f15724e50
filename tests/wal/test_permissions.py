"""The write-ahead log holds requests as received (raw telemetry, which may carry personal data
or credentials an application put in an attribute): only the bridge's user may read it,
whatever the umask, as SSH keeps ~/.ssh."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from otel_delta.wal.segments import SUFFIX
from tests.helpers import LOOPBACK, ServeProcess
from tests.test_cli import one_span_request

pytestmark = pytest.mark.e2e


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_log_is_private_to_the_bridge_user(tmp_path: Path, existing: bool) -> None:
    wal = tmp_path / "state" / "wal"
    if existing:  # e.g. a volume mounted world-readable: its files must not be
        wal.mkdir(parents=True, mode=0o755)
        os.chmod(wal, 0o755)
    config = tmp_path / "deltalake.toml"
    # a long flush interval: the request stays in the log while the test looks
    config.write_text(
        f'{LOOPBACK}[buffer]\nflush_interval_seconds = 3600\n[deltalake]\ntable_path = "'
        f'{tmp_path / "lake"}"\n[wal]\ndir = "{wal}"\n'
    )
    previous = os.umask(0o022)  # the usual umask: files 0644 and directories 0755 by default
    try:
        serve = ServeProcess(config)
    finally:
        os.umask(previous)
    try:
        with grpc.insecure_channel(serve.endpoint) as channel:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(one_span_request(1), timeout=30)
        segments = [p for p in wal.iterdir() if p.suffix == SUFFIX]
        assert segments and all(p.stat().st_size for p in segments)
        files = {p.name: oct(mode(p)) for p in wal.iterdir()}
        assert all(mode(p) & 0o077 == 0 for p in wal.iterdir()), files
        if not existing:
            assert mode(wal) == 0o700
    finally:
        assert serve.stop() == 0
