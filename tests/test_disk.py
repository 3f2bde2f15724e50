"""A commit to a local table is on the disk before the write-ahead log lets go of its records
(otel_delta/disk.py). No power can be cut here, so the bridge runs under strace, which shows
the order of its system calls: every Delta log entry and every Parquet file a commit added is
fsync'd before the log deletes a segment (before this, nothing on the lake's side was: the
only durable copy of the requests was deleted while the commit's files could still be in the
page cache)."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
from pathlib import Path
from urllib.parse import unquote

import grpc
import pyarrow as pa
import pytest
from deltalake import DeltaTable, Transaction
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from otel_delta import disk
from otel_delta.convert import spans_to_arrow
from otel_delta.disk import added_files, sync_commit
from otel_delta.engines import DeltaRsEngine
from otel_delta.errors import CommitError
from otel_delta.lakehouse import Lakehouse, append_once
from otel_delta.tables.schemas import DEAD_LETTER_TABLE, DEAD_LETTERS
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


class Fsyncs:
    """The paths `disk.fsync_path` is asked to make durable; `failing`: a path (by its end)
    that fails once with EIO, as a failing disk answers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, failing: str | None = None) -> None:
        self.paths: list[Path] = []
        self.failing = failing
        real = disk.fsync_path

        def fsync(path: Path) -> None:
            if self.failing is not None and str(path).endswith(self.failing):
                self.failing = None
                raise OSError(errno.EIO, "Input/output error", str(path))
            self.paths.append(Path(path))
            real(path)

        monkeypatch.setattr(disk, "fsync_path", fsync)


def spans_rows(i: int):
    return spans_to_arrow(one_span_request(i)).tables["spans"]


def test_a_rewrite_s_files_are_synced_by_the_next_append(tmp_path: Path, monkeypatch) -> None:
    """A delete (or compaction, or a Spark job) commits between two appends: the next append
    synced that commit's log entry but not the file it added, so after a power cut the entry
    could name an empty file, and every read failed."""
    engine = DeltaRsEngine(Lakehouse(str(tmp_path)))
    engine.append("spans", pa.concat_tables([spans_rows(1), spans_rows(2)]))  # one file
    engine.delete("spans", "name = 's1'", "a-delete")
    rewrite = DeltaTable(str(tmp_path / "spans")).version()
    entry = tmp_path / "spans" / "_delta_log" / f"{rewrite:020d}.json"
    rewritten = added_files(entry.read_bytes(), tmp_path / "spans")
    assert rewritten  # the delete rewrote the file that held s1 and s2
    fsyncs = Fsyncs(monkeypatch)
    engine.append("spans", spans_rows(3))
    assert DeltaTable(str(tmp_path / "spans")).version() == rewrite + 1
    assert entry in fsyncs.paths and set(rewritten) <= set(fsyncs.paths)


def test_the_checkpoint_an_append_writes_is_synced_with_its_hint(
    tmp_path: Path, monkeypatch
) -> None:
    """Only log entries were synced, while the log's directory was, so a checkpoint's name
    could outlive its data: delta-rs then opened nothing ("Had a _last_checkpoint hint but
    didn't find any checkpoints")."""
    engine = DeltaRsEngine(Lakehouse(str(tmp_path), checkpoint_interval=3))
    engine.append("spans", spans_rows(1))
    fsyncs = Fsyncs(monkeypatch)
    engine.append("spans", spans_rows(2))  # version 2: the third commit, checkpointed
    log_dir = tmp_path / "spans" / "_delta_log"
    checkpoint = log_dir / f"{2:020d}.checkpoint.parquet"
    assert checkpoint.exists()
    assert checkpoint in fsyncs.paths and log_dir / "_last_checkpoint" in fsyncs.paths
    assert fsyncs.paths.index(checkpoint) < fsyncs.paths.index(log_dir / "_last_checkpoint")


def test_a_failed_sync_after_a_commit_landed_does_not_store_its_rows_twice(
    tmp_path: Path, monkeypatch
) -> None:
    """The commit landed, then its file's fsync failed (EIO): the append raised CommitError
    with the handle left at the version before, so the retry with the same transaction did
    not see it and committed the rows again."""
    engine = DeltaRsEngine(Lakehouse(str(tmp_path)))
    engine.append("spans", spans_rows(1), Transaction("wal-app", 1))
    Fsyncs(monkeypatch, failing=".parquet")
    with pytest.raises(CommitError, match="was made, but could not be written to the disk"):
        engine.append("spans", spans_rows(2), Transaction("wal-app", 2))
    assert engine.append("spans", spans_rows(2), Transaction("wal-app", 2)) == 2
    table = DeltaTable(str(tmp_path / "spans"))
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table()["name"].to_pylist()) == ["s1", "s2"]


def test_a_dead_letter_is_synced_before_append_once_returns(tmp_path: Path, monkeypatch) -> None:
    """A dead letter lets the write-ahead log go of its record, like a commit does."""
    fsyncs = Fsyncs(monkeypatch)
    row = pa.Table.from_pylist([{"file": "wal:x", "offset": 7}], schema=DEAD_LETTERS)
    assert append_once(str(tmp_path), DEAD_LETTER_TABLE, row, Transaction("dl", 7))
    log_dir = tmp_path / DEAD_LETTER_TABLE / "_delta_log"
    (entry,) = [p for p in fsyncs.paths if p.parent == log_dir and p.name.endswith("1.json")]
    files = added_files(entry.read_bytes(), tmp_path / DEAD_LETTER_TABLE)
    assert files and set(files) <= set(fsyncs.paths)
