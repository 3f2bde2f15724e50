"""A commit to a local table is on the disk before the write-ahead log lets go of its records
(engines/durable.py). No power can be cut here, so the bridge runs under strace, which shows
the order of its system calls: every Delta log entry and every Parquet file a commit added is
fsync'd before the log deletes a segment (before this, nothing on the lake's side was: the
only durable copy of the requests was deleted while the commit's files could still be in the
page cache)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path
from urllib.parse import unquote

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from otel_delta.engines.durable import added_files, sync_commit
from tests.helpers import LOOPBACK, ServeProcess, read_table, wait_until
from tests.test_cli import one_span_request

STRACE = shutil.which("strace")
# fsync(7</lake/spans/_delta_log/00000000000000000001.json>) = 0, possibly split by strace
# into "<unfinished ...>" and "<... fsync resumed>" lines when another thread interleaves
FSYNC = re.compile(r"\bfsync\((\d+)<(?P<path>[^>]*)>")
UNLINK = re.compile(r'\bunlink(?:at)?\((?:\S+, )?"(?P<path>[^"]+\.wal)"')


def test_sync_commit_names_every_file_the_commit_added(tmp_path: Path) -> None:
    """The entry's paths are percent-encoded; the files on the disk keep the hive escapes."""
    root = tmp_path / "t"
    (root / "_delta_log").mkdir(parents=True)
    part = root / "service_name=a%20b" / "date=2026-11-29"
    part.mkdir(parents=True)
    (part / "f.parquet").write_bytes(b"x")
    add = {"add": {"path": "service_name=a%2520b/date=2026-11-29/f.parquet", "size": 1}}
    entry = json.dumps({"commitInfo": {}}) + "\n" + json.dumps(add) + "\n"
    (root / "_delta_log" / f"{0:020d}.json").write_text(entry)
    assert added_files(entry.encode(), root) == [part / "f.parquet"]
    sync_commit(root, 0)  # every path exists: no FileNotFoundError
    (part / "f.parquet").unlink()
    with pytest.raises(FileNotFoundError):
        sync_commit(root, 0)


@pytest.mark.e2e
def test_every_commit_is_fsynced_before_the_log_deletes_a_segment(tmp_path: Path) -> None:
    if STRACE is None:
        pytest.fail("this test needs strace (Debian package strace)")
    trace = tmp_path / "trace.txt"
    lake = tmp_path / "lake"
    config = tmp_path / "deltalake.toml"
    config.write_text(
        LOOPBACK
        + "[buffer]\nflush_interval_seconds = 0.3\n"
        + f'[deltalake]\ntable_path = "{lake}"\n'
        + "[deltalake.table]\nmaintenance_interval_seconds = 0\n"
        + f'[wal]\ndir = "{tmp_path / "wal"}"\nsegment_bytes = 65536\n'
    )
    wrapper = [STRACE, "-f", "-y", "-qq", "-o", str(trace), "-e", "trace=fsync,unlink,unlinkat"]
    server = ServeProcess(config, wrapper=wrapper)
    try:
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(server.endpoint))
        padding = "x" * 10_000  # about 6 requests a segment
        for i in range(1, 61):
            request = one_span_request(i)
            request.resource_spans[0].scope_spans[0].spans[0].name = f"s{i}-{padding}"
            stub.Export(request, timeout=30)
        wait_until(
            lambda: len(UNLINK.findall(trace.read_text())) >= 3,
            what="the log to delete committed segments",
        )
    finally:
        children = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children")
        for child in children.read_text().split():  # strace passes no SIGTERM on
            os.kill(int(child), signal.SIGTERM)
        assert server.proc.wait(timeout=60) == 0
    assert read_table(lake, "spans").num_rows == 60
    fsynced: dict[str, int] = {}  # path -> the first trace line that fsync'd it
    unlinks: list[int] = []
    lines = trace.read_text().splitlines()
    for number, line in enumerate(lines):
        if match := FSYNC.search(line):
            fsynced.setdefault(match["path"], number)
        if UNLINK.search(line) and line.rstrip().endswith("= 0"):
            unlinks.append(number)
    assert unlinks, "no segment was deleted"
    log_dir = lake / "spans" / "_delta_log"
    entries = sorted(log_dir.glob("*.json"))
    assert entries
    for entry in entries:
        needed = [entry, *added_files(entry.read_bytes(), lake / "spans")]
        for path in needed:
            assert str(path) in fsynced, f"{path} was never fsync'd"
    # the segments deleted while appends went on: each after the commits made before it
    first_unlink = unlinks[0]
    synced_before = {unquote(path) for path, number in fsynced.items() if number < first_unlink}
    assert any(p.endswith(".json") and "_delta_log" in p for p in synced_before)
    assert any(p.endswith(".parquet") for p in synced_before)
