"""Scheduled maintenance: what a round does, and that it runs beside ingestion losing nothing."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from pathlib import Path

import grpc
import pyarrow as pa
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_delta import DeltaConfig, DeltaLakeConnector
from otel_delta.config import Settings
from otel_delta.engines import commit_log
from otel_delta.engines.lease import LEASES, Leases
from otel_delta.errors import LeaseHeldError, OperationDisabledError
from otel_delta.maintenance import maintain_table
from otel_delta.maintenance.maintainer import Maintainer
from otel_delta.maintenance.settings import maintenance_policy
from otel_delta.maintenance.tasks import TablePolicy, utc_today
from otel_delta.tables.schemas import SPANS
from tests.helpers import RunningBridge, read_table
from tests.test_admin import samples

DAY_NS = 86_400 * 10**9


def day_ns(days_ago: int) -> int:
    midnight = dt.datetime.combine(utc_today(), dt.time(), tzinfo=dt.UTC)
    return int(midnight.timestamp()) * 10**9 - days_ago * DAY_NS + 3_600 * 10**9


def spans_rows(day: dt.date, ids: range) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"service_name": "svc", "date": day, "trace_id": f"{i:032x}", "span_id": f"{i:016x}"}
            for i in ids
        ],
        schema=SPANS,
    )


def spans_table(lake: Path, **deltalake):
    """The connector's spans table (as the bridge's writer creates it) under `lake`."""
    connector = DeltaLakeConnector(DeltaConfig.for_path(lake, **deltalake))
    return connector.get_or_create_table("spans")


def commit_each(table, day: dt.date, ids: range) -> None:
    for i in ids:  # one commit, one small file per row
        table.bulk_insert(spans_rows(day, range(i, i + 1)))


def uris(table) -> list[str]:
    return DeltaTable(table.uri).file_uris()


def live_files(uri: str) -> dict[str, int]:
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
    counts: dict[str, int] = {}
    for day in actions.column("partition.date").to_pylist():
        counts[str(day)] = counts.get(str(day), 0) + 1
    return counts


def compaction_data_change(path: Path) -> set[bool]:
    """dataChange flags of the add/remove actions of every OPTIMIZE commit in the log."""
    flags = set()
    for entry in DeltaTable(str(path)).history():
        if entry["operation"] == "OPTIMIZE":
            log_file = path / "_delta_log" / f"{entry['version']:020d}.json"
            for line in log_file.read_text().splitlines():
                action = json.loads(line)
                for kind in ("add", "remove"):
                    if kind in action:
                        flags.add(action[kind]["dataChange"])
    return flags


def test_round_compacts_closed_partitions_only_expires_and_vacuums(tmp_path: Path) -> None:
    table = spans_table(tmp_path)
    uri = table.uri
    today = utc_today()
    old, closed = today - dt.timedelta(days=10), today - dt.timedelta(days=1)
    commit_each(table, old, range(0, 3))
    commit_each(table, closed, range(3, 7))
    commit_each(table, today, range(7, 10))
    policy = TablePolicy(retention_hours=0, retention_days=5)
    report = maintain_table(table, policy, today=today)
    assert report.errors == []
    assert report.expired_rows_deleted == 3
    assert (report.files_compacted, report.files_written) == (4, 1)
    assert report.files_vacuumed == 3 + 4  # expired + compacted-away files, now unreferenced
    assert report.checkpointed
    # today's partition (still being appended to) is left alone; the closed one is one file
    assert live_files(uri) == {str(closed): 1, str(today): 3}
    ids = sorted(DeltaTable(uri).to_pyarrow_table().column("span_id").to_pylist())
    assert ids == [f"{i:016x}" for i in range(3, 10)]
    assert list((tmp_path / "spans" / "_delta_log").glob("*.checkpoint.parquet"))
    assert compaction_data_change(tmp_path / "spans") == {False}
    # an idle table: a second round changes nothing and writes no checkpoint again
    again = maintain_table(table, policy, today=today, checkpointed_version=report.version)
    assert again.errors == []
    assert (again.files_compacted, again.files_vacuumed, again.checkpointed) == (0, 0, False)
    assert DeltaTable(uri).version() == report.version


def test_a_failing_step_does_not_stop_the_others(tmp_path: Path, monkeypatch) -> None:
    # an injected storage fault in retention: compaction/vacuum/checkpoint still run
    table = spans_table(tmp_path)
    commit_each(table, utc_today() - dt.timedelta(days=30), range(3))

    def broken_expire(before: dt.date) -> None:
        raise OSError("injected: object store unreachable")

    monkeypatch.setattr(table, "expire", broken_expire)
    report = maintain_table(table, TablePolicy(retention_days=1, retention_hours=0))
    assert [e.split(":")[0] for e in report.errors] == ["retention"]
    assert "injected" in report.errors[0]
    assert report.files_compacted == 3 and report.files_vacuumed == 3 and report.checkpointed
    assert DeltaTable(table.uri).to_pyarrow_table().num_rows == 3


def test_retention_runs_when_user_deletes_are_disabled(tmp_path: Path) -> None:
    """delete_enabled gates user deletes; retention_days is its own switch (issue #10)."""
    table = spans_table(tmp_path, operations={"delete_enabled": False})
    commit_each(table, utc_today() - dt.timedelta(days=30), range(3))
    commit_each(table, utc_today(), range(3, 5))
    with pytest.raises(OperationDisabledError, match="delete_enabled"):
        table.delete("service_name = 'svc'")
    report = maintain_table(table, TablePolicy(retention_days=1, retention_hours=0))
    assert report.errors == [] and report.expired_rows_deleted == 3
    ids = sorted(DeltaTable(table.uri).to_pyarrow_table().column("span_id").to_pylist())
    assert ids == [f"{i:016x}" for i in range(3, 5)]


def test_policy_from_settings() -> None:
    assert maintenance_policy(Settings()) is not None  # on by default, hourly
    off = Settings(deltalake={"table": {"maintenance_interval_seconds": 0}})
    assert maintenance_policy(off) is None
    policy = maintenance_policy(Settings(deltalake={"table": {"retention_days": 0}}))
    assert policy is not None and policy.table.retention_days is None  # 0 = keep forever


def span_request(i: int, days_ago: int, service: str) -> ExportTraceServiceRequest:
    start = day_ns(days_ago) + i
    span = trace_pb2.Span(
        trace_id=(i + 1).to_bytes(16, "big"),
        span_id=(i + 1).to_bytes(8, "big"),
        name=f"op{i}",
        start_time_unix_nano=start,
        end_time_unix_nano=start + 1000,
    )
    resource = Resource(
        attributes=[KeyValue(key="service.name", value=AnyValue(string_value=service))]
    )
    return ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=resource, scope_spans=[trace_pb2.ScopeSpans(spans=[span])]
            )
        ]
    )


@pytest.mark.e2e
def test_maintenance_beside_ingestion_loses_and_blocks_nothing(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    settings = Settings(
        receiver={"grpc_endpoint": "127.0.0.1:0", "http_endpoint": "127.0.0.1:0"},
        admin={"endpoint": "127.0.0.1:0"},
        buffer={"flush_interval_seconds": 0.05},  # the default ack: write-ahead log
        wal={"dir": str(tmp_path / "wal")},
        deltalake={
            "table_path": str(lake),
            # every 0.3 s; vacuum with zero retention deletes compacted files at once
            "table": {"maintenance_interval_seconds": 0.3, "retention_hours": 0},
        },
    )
    bridge = RunningBridge(settings)
    acked: list[str] = []
    failures: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 12

    def client(worker: int) -> None:
        stub = bridge.stubs(bridge.channel())[0]
        i = worker
        while time.monotonic() < deadline:
            # closed partitions (yesterday, 3 days ago) are compacted while we append to them;
            # today's partition takes the rest
            request = span_request(i, days_ago=(0, 1, 3)[i % 3], service=f"svc{worker % 2}")
            try:
                stub.Export(request, timeout=30)
                with lock:
                    acked.append(f"{i + 1:016x}")
            except grpc.RpcError as exc:
                with lock:
                    failures.append(f"{exc.code()}: {exc.details()}")
            i += 4

    threads = [threading.Thread(target=client, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    maintainer = bridge.bridge.maintainer
    assert maintainer is not None
    scraped = samples(bridge)
    bridge.stop()

    assert failures == []
    assert len(acked) > 200
    # /metrics: the table's log as the last cleanup left it. Nothing in it expires within the
    # test (a week's retention), so the log can only have grown since
    spans_files = pa_fs.SubTreeFileSystem(str(lake / "spans"), pa_fs.LocalFileSystem())
    listed = commit_log.log_files(spans_files)
    gauge = {
        kind: scraped[("otel_delta_table_log_files", (("kind", kind), ("table", "spans")))]
        for kind in ("commit", "checkpoint")
    }
    assert 0 < gauge["commit"] <= listed.commits and 0 < gauge["checkpoint"] <= listed.checkpoints
    assert 0 < scraped[("otel_delta_table_log_bytes", (("table", "spans"),))] <= listed.bytes
    stored = read_table(lake, "spans").column("span_id").to_pylist()
    assert sorted(stored) == sorted(acked)  # every acked span, exactly once
    # the maintainer really worked on the same table during ingestion
    totals = maintainer.totals["spans"]
    assert totals.rounds >= 5
    assert totals.files_compacted > 10 and totals.files_vacuumed > 10
    ops = {h["operation"] for h in DeltaTable(str(lake / "spans")).history()}
    assert {"OPTIMIZE", "WRITE", "VACUUM END"} <= ops
    assert compaction_data_change(lake / "spans") == {False}


def test_a_replica_without_the_lease_leaves_the_rewrites_to_its_holder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process holds the table's maintenance lease (engines/lease.py): this one's
    round rewrites nothing and commits no lease, vacuum and checkpoint still run, and it says
    so once (a bridge killed while it held the lease stopped every rewrite for up to 30
    minutes without a word); once the holder releases it, the next round compacts."""
    caplog.set_level("INFO", logger="otel_delta.maintenance.tasks")
    table = spans_table(tmp_path)
    today = utc_today()
    closed = today - dt.timedelta(days=1)
    commit_each(table, closed, range(0, 4))
    holder = Leases()  # another replica
    holder.hold(table.delta(), 600)
    version = table.version()
    policy = TablePolicy(retention_hours=0)

    report = maintain_table(table, policy, today=today)
    assert report.errors == [] and report.rewrites_left_until_ms is not None
    assert maintain_table(table, policy, today=today).rewrites_left_until_ms is not None
    said = [r.getMessage() for r in caplog.records if "left to the process" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("maintenance of spans: its rewrites")
    assert (report.files_compacted, report.partitions_clustered) == (0, 0)
    assert live_files(table.uri) == {str(closed): 4}
    assert report.checkpointed and DeltaTable(table.uri).version() == version

    holder.release(table.delta())
    report = maintain_table(table, policy, today=today)
    assert report.errors == [] and report.rewrites_left_until_ms is None
    assert report.files_compacted == 4 and live_files(table.uri) == {str(closed): 1}
    ids = sorted(DeltaTable(table.uri).to_pyarrow_table().column("span_id").to_pylist())
    assert ids == [f"{i:016x}" for i in range(4)]
    with pytest.raises(LeaseHeldError):  # this process holds it now, across rounds
        holder.hold(table.delta(), 600)
    LEASES.release(table.delta())


@pytest.mark.parametrize("codec", ["GZIP", "BROTLI"])
def test_a_table_in_another_codec_is_compacted_at_a_level_that_codec_takes(
    tmp_path: Path, codec: str
) -> None:
    """With `compression = "GZIP"` compaction kept the default level 15, out of gzip's range:
    every round failed ("zlib deflateInit failed") and the small files piled up."""
    table = spans_table(tmp_path, table={"compression": codec})
    closed, today = utc_today() - dt.timedelta(days=1), utc_today()
    commit_each(table, closed, range(3))
    commit_each(table, today, range(3, 6))
    time.sleep(0.1)
    settings = Settings(
        deltalake={
            "table_path": str(tmp_path),
            "table": {"compression": codec, "open_partition_compaction_age_seconds": 0.05},
        }
    )
    policy = maintenance_policy(settings)
    assert policy is not None
    maintainer = Maintainer(policy)
    try:
        assert maintainer.run_round().errors == []
    finally:
        maintainer.stop()
    assert live_files(table.uri) == {str(closed): 1, str(today): 1}
    codecs = {pq.read_metadata(uri).row_group(0).column(0).compression for uri in uris(table)}
    assert codecs == {codec}
    assert sorted(DeltaTable(table.uri).to_pyarrow_table()["span_id"].to_pylist()) == [
        f"{i:016x}" for i in range(6)
    ]


def test_a_stopped_maintainer_releases_its_leases(tmp_path: Path) -> None:
    """So that another replica maintains the tables at its next round, not 30 min later."""
    table = spans_table(tmp_path)
    commit_each(table, utc_today() - dt.timedelta(days=1), range(3))
    settings = Settings(deltalake={"table_path": str(tmp_path), "table": {"retention_hours": 0}})
    policy = maintenance_policy(settings)
    assert policy is not None
    maintainer = Maintainer(policy)
    assert maintainer.run_round().errors == []
    other = Leases()  # another replica
    assert other.held_elsewhere(table.delta()) is not None  # the round took the lease
    maintainer.stop()
    assert other.held_elsewhere(table.delta()) is None
    assert other.hold(table.delta(), 600) is True
