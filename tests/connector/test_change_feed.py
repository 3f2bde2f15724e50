"""The change data feed (`[deltalake.table] change_data_feed = true`): the bridge's appends, the
connector's upserts and deletes on both engines, read back with `Table.changes` and with Spark's
`readChangeFeed`; a hard delete leaves no change data file holding the rows (issue #15)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pytest

from otel_delta.connector import DeltaConfig, DeltaLakeConnector
from otel_delta.errors import InvalidQueryError, VersionNotFoundError
from otel_delta.signals import SIGNALS_BY_NAME
from tests.connector import data
from tests.connector.test_erasure import holds

pytestmark = pytest.mark.e2e

REQUEST_SPANS = data.TRACES_PER_REQUEST * data.SPANS_PER_TRACE


def filled(path: Path, engine: str, spark=None, feed: bool = True) -> DeltaLakeConnector:
    """A lake whose spans table the bridge's writer filled with 4 requests (versions 1-4)."""
    config = DeltaConfig.for_path(path, table={"change_data_feed": feed})
    lake = DeltaLakeConnector(config, engine=engine, spark=spark)
    for request in data.all_requests()[:4]:
        rows = SIGNALS_BY_NAME["traces"].convert(request).tables["spans"]
        lake.engines.delta_rs.append("spans", rows)
    return lake


def kinds(changes) -> Counter:
    versions = changes["_commit_version"].to_pylist()
    return Counter(zip(versions, changes["_change_type"].to_pylist(), strict=True))


@pytest.fixture(params=["delta-rs", "spark"])
def engine(request) -> str:
    return request.param


def test_changes_of_appends_upserts_and_deletes(tmp_path: Path, engine: str, request) -> None:
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    lake = filled(tmp_path / "lake", engine, spark)
    spans = lake.table("spans")
    first = spans.query().filter("service_name = 'cart'").order_by("span_id").to_pylist()[:2]
    spans.upsert([{**row, "name": "renamed"} for row in first])  # version 5
    spans.delete("name = 'checkout op0'")  # version 6
    deleted = data.TRACES_PER_REQUEST * 2  # checkout is in 2 of the 4 requests

    changes = spans.changes(1)
    assert kinds(changes) == {
        **{(v, "insert"): REQUEST_SPANS for v in (1, 2, 3, 4)},
        (5, "update_preimage"): 2,
        (5, "update_postimage"): 2,
        (6, "delete"): deleted,
    }
    post = changes.filter(pc.equal(changes["_change_type"], "update_postimage"))
    assert post["name"].to_pylist() == ["renamed", "renamed"]
    assert kinds(spans.changes(5, 5)) == {(5, "update_preimage"): 2, (5, "update_postimage"): 2}

    session = spark or request.getfixturevalue("spark")
    feed = (
        session.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)
        .load(spans.uri)
        .groupBy("_commit_version", "_change_type")
        .count()
        .collect()
    )
    assert {(r["_commit_version"], r["_change_type"]): r["count"] for r in feed} == dict(
        kinds(changes)
    )


def test_hard_delete_removes_the_change_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_DELTA_HASH_KEY", "feed-key")
    lake = filled(tmp_path / "lake", "delta-rs")
    spans = lake.table("spans")
    # a leaf span: no other row names its id (as parent_span_id)
    victim = spans.query().filter("name = 'cart op2'").to_pylist()[0]["span_id"]
    spans.delete(f"span_id = '{victim}'")  # soft: its change data holds the row
    assert holds(tmp_path / "lake" / "spans" / "_change_data", victim)
    spans.delete(f"span_id = '{victim}'", hard=True)
    assert holds(tmp_path / "lake" / "spans", victim) == []
    assert spans.changes(spans.version()).num_rows == 0  # the feed goes on from the purge


def test_changes_need_the_feed(tmp_path: Path) -> None:
    lake = filled(tmp_path / "off", "delta-rs", feed=False)
    with pytest.raises(InvalidQueryError, match="change_data_feed = true"):
        lake.table("spans").changes(0)
    # turned on later: the existing table gets the feed from then on
    on = DeltaLakeConnector(
        DeltaConfig.for_path(tmp_path / "off", table={"change_data_feed": True})
    )
    on.engines.delta_rs.append("spans", lake.table("spans").query().limit(2).to_arrow())
    changes = on.table("spans").changes(on.table("spans").version())
    assert changes["_change_type"].to_pylist() == ["insert", "insert"]


def test_a_feed_turned_on_later_records_the_connectors_first_writes(tmp_path: Path) -> None:
    """Turned on in the config of a table the bridge made without it: the connector's own
    upsert and delete turn the feed on, as the bridge's writer does, and are recorded (they
    recorded nothing, and `changes()` asked for the setting that was set); `changes()` starts
    where the feed does (from 0 it answered only "has no version 0..None"); a start before
    the feed, a negative one or an end before the start is refused by name."""
    off = filled(tmp_path / "lake", "delta-rs", feed=False)
    before = off.table("spans").version()
    on = DeltaLakeConnector(
        DeltaConfig.for_path(tmp_path / "lake", table={"change_data_feed": True})
    )
    spans = on.table("spans")
    with pytest.raises(InvalidQueryError, match="starts at the table's next write"):
        spans.changes()  # it said "set change_data_feed = true", which is set
    with pytest.raises(InvalidQueryError, match=r"set \[deltalake.table\] change_data_feed"):
        off.table("spans").changes()
    first = spans.query().filter("service_name = 'cart'").order_by("span_id").to_pylist()[:2]
    updated = spans.upsert([{**row, "name": "renamed"} for row in first])
    deleted = spans.delete("name = 'renamed'")
    assert kinds(spans.changes()) == {
        (updated.version, "update_preimage"): 2,
        (updated.version, "update_postimage"): 2,
        (deleted.version, "delete"): 2,
    }
    with pytest.raises(VersionNotFoundError, match=f"starts at version {before + 1}"):
        spans.changes(0)
    for bad in ((-1, None), (deleted.version, updated.version)):
        with pytest.raises(InvalidQueryError):
            spans.changes(*bad)
