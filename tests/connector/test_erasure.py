"""Hard deletes (rows gone from every file under the table, audited), soft deletes, partition-
scoped deletes and upserts, on bridge-written tables (issue #15)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from otel_delta.connector import DeltaLakeConnector
from otel_delta.connector.table import Table
from otel_delta.errors import (
    ConfigError,
    InvalidPredicateError,
    InvalidQueryError,
    PartitionNotFoundError,
    StoreUnavailableError,
    VersionNotFoundError,
)
from otel_delta.privacy import keyed_hash
from tests.connector import data
from tests.helpers import data_files, refusing_new_files

pytestmark = pytest.mark.e2e  # tables written by a real bridge (gRPC server)

KEY = "test-hash-key"
EMAIL = "alice@example.com"
SECRET_SPAN = "5ec7e75ec7e75ec7"


@pytest.fixture
def hash_key(monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setenv("OTEL_DELTA_HASH_KEY", KEY)
    return KEY.encode()


def add_personal_data(spans: Table) -> dict:
    """One span whose attribute holds an email address, committed on its own, then compacted
    into the partition's other files: the address is in a live file and in tombstoned ones."""
    row = spans.query().filter("service_name = 'cart'").order_by("span_id").to_pylist()[0]
    row = {**row, "span_id": SECRET_SPAN, "attributes": [("user.email", EMAIL)]}
    spans.bulk_insert([row])
    spans.optimize(where="service_name = 'cart'")
    return row


def table_files(root: Path) -> Iterator[Path]:
    return (path for path in root.rglob("*") if path.is_file())


def holds(root: Path, *values: str) -> list[str]:
    """Files under `root` that hold any of `values`: in a Parquet column (data, checkpoints,
    change data) or in the raw bytes (log entries, statistics)."""
    found = []
    for path in table_files(root):
        raw = path.read_bytes()
        if any(value.encode() in raw for value in values):
            found.append(str(path.relative_to(root)))
            continue
        if path.suffix == ".parquet":
            text = str(pq.read_table(path).to_pylist())
            if any(value in text for value in values):
                found.append(str(path.relative_to(root)))
    return found


def test_soft_delete_stays_recoverable_by_time_travel(spans: Table, lake_path: Path) -> None:
    add_personal_data(spans)
    before = spans.version()
    result = spans.delete(f"span_id = '{SECRET_SPAN}'")
    assert (result.deleted, result.hard) == (1, False)
    assert spans.query().filter(f"span_id = '{SECRET_SPAN}'").count() == 0
    assert spans.query().version(before).filter(f"span_id = '{SECRET_SPAN}'").count() == 1
    assert holds(lake_path / "spans", EMAIL)  # still on disk, as a soft delete promises


def test_hard_delete_leaves_no_file_holding_the_rows(
    lake: DeltaLakeConnector, spans: Table, lake_path: Path, hash_key: bytes
) -> None:
    add_personal_data(spans)
    before = spans.version()
    others = spans.query().count() - 1
    assert holds(lake_path / "spans", EMAIL, SECRET_SPAN)

    result = spans.delete(f"span_id = '{SECRET_SPAN}'", hard=True, actor="dpo@example.com")

    assert (result.deleted, result.hard) == (1, True)
    assert result.files_purged >= 2  # the compacted file and the files compaction replaced
    assert result.log_entries_removed > before
    assert holds(lake_path / "spans", EMAIL, SECRET_SPAN) == []
    assert spans.query().count() == others  # nothing else went
    with pytest.raises(VersionNotFoundError):
        spans.query().version(before).count()  # not wrong data: an error
    assert spans.version() == result.version

    audit = lake.audit_log().to_pylist()
    assert len(audit) == 1
    record = audit[0]
    assert record["actor"] == "dpo@example.com" and record["operation"] == "hard_delete"
    assert record["table_name"] == "spans" and record["rows_affected"] == 1
    assert record["files_purged"] == result.files_purged
    assert record["version_before"] == before and record["version_after"] == result.version
    assert record["predicate"] == f"(`span_id` = '{keyed_hash(SECRET_SPAN, hash_key)}')"
    assert holds(lake_path / "_audit", SECRET_SPAN, EMAIL) == []

    # the table goes on: the bridge's writer and the connector both still append and read
    lake.engines.delta_rs.append("spans", spans.query().limit(1).to_arrow())
    assert spans.query().count() == others + 1


def test_hard_delete_also_erases_rows_a_soft_delete_left_in_old_versions(
    spans: Table, lake_path: Path, hash_key: bytes
) -> None:
    add_personal_data(spans)
    spans.delete(f"span_id = '{SECRET_SPAN}'")  # soft: the address stays in old files
    assert holds(lake_path / "spans", EMAIL)
    result = spans.delete(f"span_id = '{SECRET_SPAN}'", hard=True)
    assert result.deleted == 0 and result.files_purged > 0
    assert holds(lake_path / "spans", EMAIL, SECRET_SPAN) == []


def test_hard_delete_counts_only_the_files_it_removed(
    lake: DeltaLakeConnector, spans: Table, lake_path: Path, hash_key: bytes
) -> None:
    """delta-rs keeps listing a file an earlier vacuum removed until its tombstone expires: the
    purge counts (in the result and the audit) only files that were on disk and went."""
    table = lake_path / "spans"
    add_personal_data(spans)
    assert spans.vacuum(retention_hours=0).files  # compaction's inputs go, tombstones stay
    on_disk = data_files(table)

    result = spans.delete(f"span_id = '{SECRET_SPAN}'", hard=True)

    gone = on_disk - data_files(table)
    assert len(gone) == 1  # the one file the delete rewrote
    assert result.files_purged == 1
    on_disk = data_files(table)
    again = spans.delete(f"span_id = '{SECRET_SPAN}'", hard=True)  # nothing left to purge
    assert (again.deleted, again.files_purged) == (0, 0)
    assert data_files(table) == on_disk
    # one record per hard delete (the second purge commits nothing: both end at one version)
    assert sorted(record["files_purged"] for record in lake.audit_log().to_pylist()) == [0, 1]


def test_hard_delete_without_the_key_deletes_nothing(
    spans: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_DELTA_HASH_KEY", raising=False)
    add_personal_data(spans)
    version = spans.version()
    with pytest.raises(ConfigError, match="OTEL_DELTA_HASH_KEY is unset"):
        spans.delete(f"span_id = '{SECRET_SPAN}'", hard=True)
    assert spans.version() == version
    assert spans.query().filter(f"span_id = '{SECRET_SPAN}'").count() == 1


def test_hard_delete_refuses_a_table_with_deletion_vectors(spans: Table, hash_key: bytes) -> None:
    spans.delta().alter.set_table_properties(
        {"delta.enableDeletionVectors": "true"}, raise_if_not_exists=False
    )
    version = spans.version()
    with pytest.raises(InvalidQueryError, match="deletion vectors"):
        spans.delete("service_name = 'cart'", hard=True)
    assert spans.version() == version


def live_files(spans: Table) -> set[str]:
    return set(spans.delta().file_uris())


def test_delete_scoped_to_a_partition_rewrites_only_its_files(spans: Table) -> None:
    day = data.DAYS[0].isoformat()
    path = f"service_name=cart/date={day}"
    outside = {f for f in live_files(spans) if f"service_name=cart/date={day}" not in f}
    result = spans.delete("name = 'cart op1'", partition_path=path)
    assert result.deleted == data.COMMITS_PER_PARTITION * data.TRACES_PER_REQUEST
    assert outside <= live_files(spans)  # no file of another partition was rewritten
    assert spans.query().filter("name = 'cart op1'").count() == result.deleted  # other day
    whole = spans.delete(partition_path=f"service_name=search/date={day}")
    assert whole.deleted == data.COMMITS_PER_PARTITION * data.TRACES_PER_REQUEST * 3

    with pytest.raises(InvalidPredicateError, match="partition columns"):
        spans.delete("name = 'x'", partition_path="name=cart")
    with pytest.raises(InvalidPredicateError):
        spans.delete("name = 'x'", partition_path="service_name")
    with pytest.raises(PartitionNotFoundError):
        spans.delete("name = 'x'", partition_path="service_name=nope")
    with pytest.raises(InvalidQueryError):
        spans.delete()


def test_upsert_scoped_to_a_partition(spans: Table) -> None:
    day = data.DAYS[1].isoformat()
    rows = spans.query().filter(f"service_name = 'checkout' AND date = '{day}'").to_pylist()
    outside = {f for f in live_files(spans) if f"service_name=checkout/date={day}" not in f}
    changed = [{**row, "name": "scoped"} for row in rows[:3]]
    result = spans.upsert(changed, partition_path=f"service_name=checkout/date={day}")
    assert (result.inserted, result.updated) == (0, 3)
    assert outside <= live_files(spans)
    stray = spans.query().filter("service_name = 'cart'").limit(1).to_pylist()
    with pytest.raises(InvalidQueryError, match="not in partition"):
        spans.upsert(changed + stray, partition_path=f"service_name=checkout/date={day}")


def test_operation_metrics(lake: DeltaLakeConnector, spans: Table) -> None:
    spans.query().filter("service_name = 'cart'").count()
    spans.query().count()
    spans.delete("name = 'cart op2'")
    with pytest.raises(InvalidPredicateError):
        spans.delete("no_such_column = 1")
    spans.optimize()
    figures = spans.operation_metrics()
    assert figures["query"].count == 2 and figures["query"].errors == 0
    assert figures["query"].rows > 0 and figures["query"].p99_ms >= figures["query"].p50_ms > 0
    assert figures["delete"].count == 2 and figures["delete"].errors == 1
    assert figures["delete"].rows == data.COMMITS_PER_PARTITION * data.TRACES_PER_REQUEST * 2
    assert "no_such_column" in (figures["delete"].last_error or "")
    assert figures["optimize"].count == 1
    assert lake.operation_metrics()["delete"].count == 2
    assert lake.table("spans").operation_metrics()["delete"].count == 2  # per connector

    from prometheus_client import REGISTRY

    seconds = REGISTRY.get_sample_value(
        "otel_delta_connector_operation_duration_seconds_count",
        {"table": "spans", "operation": "delete", "outcome": "error"},
    )
    assert seconds is not None and seconds >= 1


def test_a_hard_delete_whose_purge_fails_is_audited(
    lake: DeltaLakeConnector, spans: Table, lake_path: Path, hash_key: bytes
) -> None:
    """The delete committed, then the purge failed (the store refused to delete a file): no
    `_audit` record was written, though the rows were out of the current version and still in
    the files. Now the record is written, saying so, before the error goes on."""
    table = lake_path / "spans"
    partition = sorted(table.glob("service_name=cart/date=*"))[0]
    where = f"service_name = 'cart' AND date = '{partition.name.split('=')[1]}'"
    rows = spans.query().filter(where).count()
    before = spans.version()

    with refusing_new_files(partition), pytest.raises(StoreUnavailableError, match="delete"):
        spans.delete(where, hard=True, actor="dpo")

    assert spans.query().filter(where).count() == 0  # the delete itself committed
    (record,) = lake.audit_log().to_pylist()
    assert (record["operation"], record["actor"], record["rows_affected"]) == (
        "hard_delete",
        "dpo",
        rows,
    )
    assert record["predicate"].endswith(" [purge failed]")
    assert (record["files_purged"], record["version_before"]) == (0, before)

    again = spans.delete(where, hard=True)  # purges even when it matches no row: finishes it
    assert again.deleted == 0 and again.files_purged >= 1
    predicates = {r["predicate"] for r in lake.audit_log().to_pylist()}
    assert predicates == {record["predicate"], record["predicate"].removesuffix(" [purge failed]")}
