"""Scheduled maintenance on an S3 lakehouse (versitygw): one round of the Maintainer `serve` runs,
with the policy `serve` builds from its settings, on a spans table a real bridge wrote to S3.

The same lake shape and expectations as tests/maintenance/test_maintainer.py's local round: an
expired partition (10 days old), a closed one (yesterday) of several small files, and today's.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from otel_delta.config import Settings
from otel_delta.maintenance import Maintainer
from otel_delta.maintenance.settings import maintenance_policy
from otel_delta.maintenance.tasks import utc_today
from tests.helpers import LOOPBACK_RECEIVER, RunningBridge
from tests.maintenance.test_maintainer import span_request
from tests.s3 import S3Server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

LAKE = "lake"
# span i (id i + 1) is dated `days_ago` days before today, one Export (one commit, one file) each
EXPIRED, CLOSED, OPEN = range(0, 3), range(3, 7), range(7, 10)


def s3_settings(tmp_path: Path, s3: S3Server, **table: object) -> Settings:
    """A bridge on s3://bucket/lake whose maintenance keeps 5 days and vacuums at once; its own
    maintainer would first run in an hour, so only the test's rounds run. `table` adds keys of
    `[deltalake.table]` (settings are frozen once built)."""
    return Settings(
        receiver=LOOPBACK_RECEIVER,
        admin={"endpoint": "127.0.0.1:0"},
        buffer={"flush_interval_seconds": 0.1, "ack": "commit"},  # an answer = a commit
        wal={"dir": str(tmp_path / "wal")},
        deltalake={
            "table_path": s3.url(LAKE),
            "storage": {"options": s3.storage_options()},
            "table": {
                "maintenance_interval_seconds": 3600,
                "retention_days": 5,
                "retention_hours": 0,
                **table,
            },
        },
    )


def spans_table(s3: S3Server) -> DeltaTable:
    return DeltaTable(s3.url(LAKE, "spans"), storage_options=s3.storage_options())


def live_files(s3: S3Server) -> dict[str, int]:
    """Data files of the spans table per date partition, from its log on S3."""
    actions = pa.table(spans_table(s3).get_add_actions(flatten=True))
    counts: dict[str, int] = {}
    for day in actions.column("partition.date").to_pylist():
        counts[str(day)] = counts.get(str(day), 0) + 1
    return counts


def data_objects(s3: S3Server) -> set[str]:
    return {
        k for k in s3.objects(LAKE, "spans") if k.endswith(".parquet") and "_delta_log" not in k
    }


def compaction_data_change(s3: S3Server) -> set[bool]:
    """dataChange flags of the add/remove actions of every OPTIMIZE commit (log read from the
    served folder)."""
    flags = set()
    log = s3.root / s3.bucket / LAKE / "spans" / "_delta_log"
    for entry in spans_table(s3).history():
        if entry["operation"] == "OPTIMIZE":
            for line in (log / f"{entry['version']:020d}.json").read_text().splitlines():
                action = json.loads(line)
                for kind in ("add", "remove"):
                    if kind in action:
                        flags.add(action[kind]["dataChange"])
    return flags


def test_a_maintainer_round_on_s3(tmp_path: Path, s3: S3Server) -> None:
    settings = s3_settings(tmp_path, s3)
    bridge = RunningBridge(settings)
    try:
        stub = bridge.stubs(bridge.channel())[0]
        for ids, days_ago in ((EXPIRED, 10), (CLOSED, 1), (OPEN, 0)):
            for i in ids:
                stub.Export(span_request(i, days_ago, "svc"), timeout=60)
    finally:
        bridge.stop()
    today = utc_today()
    closed = today - dt.timedelta(days=1)
    written = spans_table(s3).version()
    assert written == 10  # created, then one commit per span
    assert live_files(s3) == {str(today - dt.timedelta(days=10)): 3, str(closed): 4, str(today): 3}
    before = data_objects(s3)
    assert len(before) == 10

    policy = maintenance_policy(settings)  # what `serve` runs
    assert policy is not None and policy.table.retention_days == 5
    maintainer = Maintainer(policy)
    assert maintainer.connector.root == s3.url(LAKE)
    round_ = maintainer.run_round()
    assert round_.errors == []
    [report] = round_.tables  # the other tables do not exist yet
    assert report.table == "spans"
    assert report.expired_rows_deleted == len(EXPIRED)
    assert (report.files_compacted, report.files_written) == (len(CLOSED), 1)
    assert report.files_vacuumed == len(EXPIRED) + len(CLOSED)  # now unreferenced: deleted
    assert report.checkpointed and report.version == spans_table(s3).version() > written

    # today's partition (still being appended to) is left alone; the closed one is one file
    assert live_files(s3) == {str(closed): 1, str(today): 3}
    ids = sorted(spans_table(s3).to_pyarrow_table().column("span_id").to_pylist())
    assert ids == [f"{i + 1:016x}" for i in (*CLOSED, *OPEN)]  # same rows, the expired gone
    assert compaction_data_change(s3) == {False}
    # vacuum deleted the objects of the expired and compacted files: only live files are left
    after = data_objects(s3)
    assert len(after) == 1 + len(OPEN)
    assert len(before - after) == len(EXPIRED) + len(CLOSED)
    live = pa.table(spans_table(s3).get_add_actions(flatten=True)).column("path").to_pylist()
    assert {f"{LAKE}/spans/{path}" for path in live} == after
    log = s3.objects(LAKE, "spans", "_delta_log")
    assert f"{LAKE}/spans/_delta_log/{report.version:020d}.checkpoint.parquet" in log
    ops = [h["operation"] for h in spans_table(s3).history()]
    assert {"DELETE", "OPTIMIZE", "VACUUM START", "VACUUM END"} <= set(ops)
    totals = maintainer.totals["spans"]
    assert (totals.rounds, totals.files_compacted, totals.files_vacuumed) == (1, 4, 7)
    assert (totals.expired_rows_deleted, totals.errors) == (3, 0)

    # an idle table: the next round changes nothing and writes no checkpoint again
    again = maintainer.run_round()
    assert again.errors == []
    [idle] = again.tables
    assert (idle.files_compacted, idle.files_vacuumed, idle.expired_rows_deleted) == (0, 0, 0)
    assert not idle.checkpointed
    assert spans_table(s3).version() == report.version
    assert data_objects(s3) == after


def test_todays_files_are_clustered_on_s3(tmp_path: Path, s3: S3Server) -> None:
    """The open-partition compaction on S3: it reads the ingested objects, writes its sorted
    file through delta-rs's object store, commits the swap, and vacuum removes the inputs."""
    settings = s3_settings(tmp_path, s3, open_partition_compaction_age_seconds=0.5)
    bridge = RunningBridge(settings)
    try:
        stub = bridge.stubs(bridge.channel())[0]
        for i in OPEN:
            stub.Export(span_request(i, 0, "svc"), timeout=60)
    finally:
        bridge.stop()
    today = str(utc_today())
    assert live_files(s3) == {today: 3}
    time.sleep(1.0)  # older than the minimum age

    policy = maintenance_policy(settings)
    assert policy is not None and policy.table.open_partition_age_seconds == 0.5
    round_ = Maintainer(policy).run_round()

    assert round_.errors == []
    [report] = round_.tables
    assert (report.open_files_compacted, report.open_files_written) == (3, 1)
    assert live_files(s3) == {today: 1}
    [path] = pa.table(spans_table(s3).get_add_actions(flatten=True)).column("path").to_pylist()
    assert path.rsplit("/", 1)[1].startswith("clustered-")
    assert data_objects(s3) == {f"{LAKE}/spans/{path}"}  # the inputs vacuumed
    ids = sorted(spans_table(s3).to_pyarrow_table().column("span_id").to_pylist())
    assert ids == [f"{i + 1:016x}" for i in OPEN]


def test_a_closed_day_is_sorted_across_its_files_on_s3(tmp_path: Path, s3: S3Server) -> None:
    """A closed day whose files' trace id ranges overlap is rewritten by our writer through
    delta-rs's object store (closed_days.py): one sorted file, every row once, its inputs
    vacuumed."""
    settings = s3_settings(tmp_path, s3)
    bridge = RunningBridge(settings)
    pairs = [(i, i + 4) for i in range(4)]  # each Export's two trace ids span the others'
    try:
        stub = bridge.stubs(bridge.channel())[0]
        for low, high in pairs:
            request = span_request(low, 1, "svc")
            other = span_request(high, 1, "svc").resource_spans[0].scope_spans[0].spans[0]
            request.resource_spans[0].scope_spans[0].spans.append(other)
            stub.Export(request, timeout=60)
    finally:
        bridge.stop()
    closed = str(utc_today() - dt.timedelta(days=1))
    assert live_files(s3) == {closed: 4}

    round_ = Maintainer(maintenance_policy(settings)).run_round()

    assert round_.errors == []
    [report] = round_.tables
    assert report.partitions_clustered == 1 and report.files_compacted == 4
    assert live_files(s3) == {closed: 1}
    [path] = pa.table(spans_table(s3).get_add_actions(flatten=True)).column("path").to_pylist()
    assert path.rsplit("/", 1)[1].startswith("clustered-")
    assert data_objects(s3) == {f"{LAKE}/spans/{path}"}  # the inputs vacuumed
    written = pq.ParquetFile(s3.root / s3.bucket / LAKE / "spans" / unquote(path))
    assert written.metadata.created_by.startswith("parquet-cpp-arrow")  # ours, not delta-rs's
    ids = written.read(columns=["span_id"]).column("span_id").to_pylist()
    assert sorted(ids) == [f"{i + 1:016x}" for i in range(8)]
    stored = spans_table(s3).to_pyarrow_table().column("span_id").to_pylist()
    assert sorted(stored) == sorted(ids)
