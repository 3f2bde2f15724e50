"""Rows a table refuses for what they hold never block anyone else: with a CHECK constraint on
the spans table (added with delta-rs, as a user would), a request with a refused span is held
back alone — a dead letter in WAL mode, INVALID_ARGUMENT in commit mode — while the requests
committed with it land, exactly once, also across a restart."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pyarrow as pa
import pytest
from deltalake import DeltaTable, Transaction
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_delta.errors import RowsRejectedError
from otel_delta.lakehouse import Lakehouse, append_once
from otel_delta.pipeline.dead_letters import DeadLetters
from otel_delta.tables.schemas import DEAD_LETTER_TABLE, DEAD_LETTERS
from otel_delta.wal import WriteAheadLog
from tests.helpers import RunningBridge, make_settings, read_table, table_exists, wait_until

pytestmark = pytest.mark.e2e

NOW = time.time_ns()


def request(tag: int, names: list[str]) -> ExportTraceServiceRequest:
    spans = [
        trace_pb2.Span(
            trace_id=tag.to_bytes(16, "big"),
            span_id=(tag * 100 + i + 1).to_bytes(8, "big"),
            name=name,
            start_time_unix_nano=NOW,
            end_time_unix_nano=NOW + 1000,
        )
        for i, name in enumerate(names)
    ]
    resource = trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=spans)])
    resource.resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value="dlq"))
    )
    return ExportTraceServiceRequest(resource_spans=[resource])


def forbid_poison(lake: Path) -> None:
    DeltaTable(str(lake / "spans")).alter.add_constraint({"no_poison": "name != 'poison'"})


@pytest.mark.parametrize("compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip])
def test_wal_mode_moves_the_refused_request_to_the_dead_letters(
    tmp_path: Path, compression: grpc.Compression
) -> None:
    """Also when the request came gzip'd (the log keeps it so): the dead letter holds its
    protobuf, as backfill's dead letters do."""
    lake, wal = tmp_path / "lake", tmp_path / "wal"
    settings = make_settings(lake, ack="wal", wal_dir=wal, flush_interval_seconds=1.0)
    bridge = RunningBridge(settings)
    try:
        traces, _, _ = bridge.stubs(bridge.channel(compression=compression))
        traces.Export(request(1, ["first"]))
        wait_until(lambda: table_exists(lake, "spans") and read_table(lake, "spans").num_rows == 1)
        forbid_poison(lake)

        poison = request(3, ["fine", "poison"])
        futures = [
            traces.Export.future(r) for r in (request(2, ["a", "b"]), poison, request(4, ["c"]))
        ]
        for future in futures:
            future.result(timeout=30)  # all acknowledged: the WAL holds them
        assert bridge.bridge.wal is not None
        wait_until(lambda: bridge.bridge.wal.pending_records == 0)
    finally:
        bridge.stop()

    names = sorted(read_table(lake, "spans").column("name").to_pylist())
    assert names == ["a", "b", "c", "first"]
    dead = read_table(lake, DEAD_LETTER_TABLE).to_pylist()
    assert len(dead) == 1
    assert dead[0]["raw"] == poison.SerializeToString()
    assert dead[0]["reason"].startswith("spans: ") and "refused" in dead[0]["reason"]

    # a restart on the same log stores nothing twice
    again = RunningBridge(settings)
    again.stop()
    assert read_table(lake, "spans").num_rows == 4
    assert read_table(lake, DEAD_LETTER_TABLE).num_rows == 1


def test_commit_mode_refuses_only_the_request_at_fault(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    bridge = RunningBridge(make_settings(lake, ack="commit", flush_interval_seconds=1.0))
    try:
        traces, _, _ = bridge.stubs(bridge.channel())
        traces.Export(request(1, ["first"]))
        forbid_poison(lake)
        good = [traces.Export.future(request(2, ["a"])), traces.Export.future(request(4, ["c"]))]
        bad = traces.Export.future(request(3, ["fine", "poison"]))
        for future in good:
            future.result(timeout=30)
        with pytest.raises(grpc.RpcError) as refused:
            bad.result(timeout=30)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "refused" in refused.value.details()
    finally:
        bridge.stop()
    assert sorted(read_table(lake, "spans").column("name").to_pylist()) == ["a", "c", "first"]
    assert not table_exists(lake, DEAD_LETTER_TABLE)


def log_request(tag: int, severity: str) -> ExportLogsServiceRequest:
    record = logs_pb2.LogRecord(
        time_unix_nano=NOW, severity_text=severity, body=AnyValue(string_value=f"log {tag}")
    )
    resource = logs_pb2.ResourceLogs(scope_logs=[logs_pb2.ScopeLogs(log_records=[record])])
    resource.resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value="dlq"))
    )
    return ExportLogsServiceRequest(resource_logs=[resource])


def test_dead_letters_of_two_tables_out_of_log_order_are_both_kept(tmp_path: Path) -> None:
    """A poison span is logged, then a poison log record, while the spans table's commits
    fail (its log replaced by a file: storage down) and wait in backoff; so the logs table's
    dead letter is written first. Both tables' dead letters shared one Delta transaction id,
    whose version (the later log position) marked the span's request as written already: it
    was acknowledged, released from the log, and stored nowhere."""
    lake, wal = tmp_path / "lake", tmp_path / "wal"
    settings = make_settings(lake, ack="wal", wal_dir=wal, flush_interval_seconds=0.2)
    bridge = RunningBridge(settings)
    try:
        traces, _, logs = bridge.stubs(bridge.channel())
        traces.Export(request(1, ["first"]))
        logs.Export(log_request(1, "INFO"))
        wait_until(lambda: all(table_exists(lake, name) for name in ("spans", "logs")))
        wait_until(lambda: read_table(lake, "logs").num_rows == 1)
        forbid_poison(lake)
        DeltaTable(str(lake / "logs")).alter.add_constraint(
            {"no_poison": "severity_text != 'poison'"}
        )
        spans_log = lake / "spans" / "_delta_log"
        spans_log.rename(lake / "spans" / "_delta_log.away")
        spans_log.write_text("storage down")

        poison_span = request(2, ["poison"])
        traces.Export(poison_span)  # acknowledged: in the log, its table failing
        poison_log = log_request(2, "poison")
        logs.Export(poison_log)
        wait_until(
            lambda: (
                table_exists(lake, DEAD_LETTER_TABLE)
                and read_table(lake, DEAD_LETTER_TABLE).num_rows == 1
            )
        )
        spans_log.unlink()
        (lake / "spans" / "_delta_log.away").rename(spans_log)
        assert bridge.bridge.wal is not None
        wait_until(lambda: bridge.bridge.wal.pending_records == 0, timeout=60)
    finally:
        bridge.stop()

    dead = read_table(lake, DEAD_LETTER_TABLE).to_pylist()
    assert sorted(d["raw"] for d in dead) == sorted(
        [poison_span.SerializeToString(), poison_log.SerializeToString()]
    ), [d["reason"] for d in dead]
    assert sorted(d["reason"].split(":")[0] for d in dead) == ["logs", "spans"]
    # a restart on the same log stores nothing twice
    RunningBridge(settings).stop()
    assert read_table(lake, DEAD_LETTER_TABLE).num_rows == 2


def test_a_dead_letter_an_older_build_wrote_is_not_written_again(tmp_path: Path) -> None:
    """Builds before 898c7d5 marked every table's dead letters with one shared id. Upgrading
    after such a build was killed between a dead letter and its record's release stored the
    dead letter twice (found by the upgrade review: kill -9, then the new build, 2 rows)."""
    wal = WriteAheadLog(tmp_path / "wal", segment_bytes=1 << 20, max_bytes=1 << 30)
    wal.open()
    raws = [log_request(tag, "poison").SerializeToString() for tag in (1, 2)]

    async def log_them() -> list[int]:
        wal.start()
        positions = [await wal.append(0, raw, None, commits=1) for raw in raws]
        await wal.close()
        return positions

    first, second = asyncio.run(log_them())
    root = str(tmp_path / "lake")
    dead = DeadLetters(Lakehouse(root=root), wal)
    older = {
        "file": f"wal:{wal.app_id}",
        "offset": first,
        "reason": "logs: refused",
        "raw": raws[0],
    }
    older_rows = pa.Table.from_pylist([older], schema=DEAD_LETTERS)
    assert append_once(root, DEAD_LETTER_TABLE, older_rows, Transaction(dead.app_id, first))

    refused = RowsRejectedError("refused")
    dead.write("logs", first, refused)  # the older build's: not again
    dead.write("spans", first, refused)  # another table's, which the shared id had lost
    dead.write("logs", second, refused)  # past the shared id's version
    dead.write("logs", second, refused)  # and once, as ever
    rows = read_table(tmp_path / "lake", DEAD_LETTER_TABLE).to_pylist()
    assert sorted((row["offset"], row["reason"].split(":")[0]) for row in rows) == [
        (first, "logs"),
        (first, "spans"),
        (second, "logs"),
    ]
