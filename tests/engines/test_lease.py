"""The maintenance lease (engines/lease.py): one process at a time rewrites a table's files.

Each `Leases` instance stands for one process, on handles of its own, over a real table.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import CommitProperties

from otel_delta.engines.data_files import commit_actions
from otel_delta.engines.lease import LEASE_APP_ID, LEASE_OPERATION, Leases, now_ms
from otel_delta.errors import LeaseHeldError, OtelDeltaError

SECONDS = 60.0
LENGTH_MS = int(SECONDS * 1000)


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = tmp_path / "spans"
    write_deltalake(str(path), pa.table({"span_id": ["a", "b"]}), name="spans")
    return str(path)


def lease_commits(uri: str) -> list[int]:
    """The lease versions committed, in log order."""
    found = []
    for entry in sorted((Path(uri) / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn and txn["appId"] == LEASE_APP_ID:
                found.append(txn["version"])
    return found


def test_a_second_process_is_refused_until_the_lease_ends(uri: str) -> None:
    ours, theirs = Leases(), Leases()
    start = now_ms()
    assert ours.hold(DeltaTable(uri), SECONDS, at_ms=start) is True
    assert lease_commits(uri) == [start + LENGTH_MS]

    other = DeltaTable(uri)
    assert theirs.held_elsewhere(other, start + 1) == start + LENGTH_MS
    assert ours.held_elsewhere(DeltaTable(uri), start + 1) is None  # our own lease
    with pytest.raises(LeaseHeldError, match="'spans' is being maintained by another process"):
        theirs.hold(other, SECONDS, at_ms=start + 1)
    assert isinstance(LeaseHeldError("spans", start), OtelDeltaError)

    # once it has run out (its holder died), the other process takes it, and we lose it
    later = start + LENGTH_MS + 1
    assert theirs.hold(other, SECONDS, at_ms=later) is True
    with pytest.raises(LeaseHeldError):
        ours.hold(DeltaTable(uri), SECONDS, at_ms=later + 1)
    assert lease_commits(uri) == [start + LENGTH_MS, later + LENGTH_MS]


def test_of_two_processes_taking_it_at_once_one_holds_it(uri: str) -> None:
    ours, theirs = Leases(), Leases()
    stale = DeltaTable(uri)  # read before our lease commits, as a racing process would
    real_update = stale.update_incremental
    calls = iter([lambda: None])  # its first update finds nothing new: the race
    stale.update_incremental = lambda: next(calls, real_update)()  # type: ignore[method-assign]

    ours.hold(DeltaTable(uri), SECONDS)
    with pytest.raises(LeaseHeldError):
        theirs.hold(stale, SECONDS)  # its commit of the lease fails: delta-rs's txn check
    assert len(lease_commits(uri)) == 1
    assert theirs.held() == [] and len(ours.held()) == 1


def test_the_holder_renews_only_once_less_than_half_is_left(uri: str) -> None:
    ours = Leases()
    start = now_ms()
    ours.hold(DeltaTable(uri), SECONDS, at_ms=start)
    assert ours.hold(DeltaTable(uri), SECONDS, at_ms=start + LENGTH_MS // 2 - 1) is False
    assert len(lease_commits(uri)) == 1  # more than half left: no commit
    renewed = start + LENGTH_MS // 2 + 1
    assert ours.hold(DeltaTable(uri), SECONDS, at_ms=renewed) is False  # held before too
    assert lease_commits(uri) == [start + LENGTH_MS, renewed + LENGTH_MS]


def test_a_released_lease_is_taken_at_once(uri: str) -> None:
    ours, theirs = Leases(), Leases()
    ours.hold(DeltaTable(uri), SECONDS)
    ours.release(DeltaTable(uri))
    assert ours.held() == []
    assert theirs.hold(DeltaTable(uri), SECONDS) is True
    ours.release(DeltaTable(uri))  # not ours any more: nothing committed
    assert len(lease_commits(uri)) == 3
    assert theirs.held_elsewhere(DeltaTable(uri)) is None


def test_holding_releases_only_a_lease_it_took(uri: str) -> None:
    ours, theirs = Leases(), Leases()
    with ours.holding(DeltaTable(uri), SECONDS), pytest.raises(LeaseHeldError):
        theirs.hold(DeltaTable(uri), SECONDS)
    assert theirs.held_elsewhere(DeltaTable(uri)) is None  # released after the operation

    ours.hold(DeltaTable(uri), SECONDS)  # held before, as a bridge's maintainer holds it
    with ours.holding(DeltaTable(uri), SECONDS):
        pass
    assert theirs.held_elsewhere(DeltaTable(uri)) is not None  # still ours


def test_a_lease_commit_changes_no_row_and_says_what_it_is(uri: str) -> None:
    Leases().hold(DeltaTable(uri), SECONDS)
    table = DeltaTable(uri)
    assert table.to_pyarrow_table().column("span_id").to_pylist() == ["a", "b"]
    assert table.history(1)[0]["otel_delta.operation"] == LEASE_OPERATION


def test_a_rewrite_carrying_a_lease_that_ran_out_fails_once_another_took_it(uri: str) -> None:
    """A rewrite that outlived its lease (a long sort, a paused process): another process
    took the lease meanwhile, so the rewrite's commit, carrying the lease it started with,
    fails instead of landing beside the other's rewrite."""
    ours, theirs = Leases(), Leases()
    start = now_ms()
    rewriting = DeltaTable(uri)
    ours.hold(rewriting, SECONDS, at_ms=start - LENGTH_MS - 1)  # ran out a moment ago
    theirs.hold(DeltaTable(uri), SECONDS, at_ms=start)
    carried = ours.transaction(rewriting)
    assert carried is not None and theirs.transaction(rewriting) is not None
    with pytest.raises(CommitFailedError, match="Concurrent transaction"):
        commit_actions(rewriting, [], CommitProperties(app_transactions=[carried]))
    assert Leases().transaction(rewriting) is None  # a process holding nothing carries nothing


def test_one_rewrite_of_a_table_at_a_time_within_a_process(uri: str) -> None:
    """The lease tells processes apart; threads of one process (a bridge's maintainer and an
    optimize through its ConnectorService) take turns."""
    leases = Leases()
    inside, order = threading.Event(), []

    def first() -> None:
        with leases.holding(DeltaTable(uri), SECONDS):
            order.append("first in")
            inside.set()
            time.sleep(0.5)
            order.append("first out")

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(10)
    with leases.holding(DeltaTable(uri), SECONDS):  # the same process: waits, is not refused
        order.append("second in")
    thread.join(10)
    assert order == ["first in", "first out", "second in"]


def test_holding_renews_the_lease_while_the_operation_runs(uri: str) -> None:
    """delta-rs's own rewrites cannot carry the lease in their commit: one that runs longer
    than half a lease keeps it by renewals, so no other process takes it meanwhile."""
    ours, theirs = Leases(), Leases()
    short = 2.0  # s: renewed once less than 1 s is left, looked at every 0.5 s
    with ours.holding(DeltaTable(uri), short):
        time.sleep(5.0)  # two and a half leases
        assert theirs.held_elsewhere(DeltaTable(uri)) is not None
    assert len(lease_commits(uri)) >= 1 + 2 + 1  # taken, renewed, released
    assert theirs.held_elsewhere(DeltaTable(uri)) is None


def test_holding_with_waiting_waits_for_the_other_process_instead_of_failing(uri: str) -> None:
    """The backfill's use (backfill/ledger.py): a run that finds another's lease waits for it,
    told of each refusal, and holds the lease once the other released it. A lease of another
    kind (another app id) is another lease: the maintenance lease stays free meanwhile."""
    kind = "otel-delta.test-lease"
    ours, theirs = Leases(kind, "test"), Leases(kind, "test")
    ours.hold(DeltaTable(uri), SECONDS)
    refused, inside = threading.Event(), threading.Event()

    def wait(held: LeaseHeldError) -> None:
        refused.set()
        time.sleep(0.05)

    def other() -> None:
        with theirs.holding(DeltaTable(uri), SECONDS, waiting=wait):
            inside.set()

    thread = threading.Thread(target=other)
    thread.start()
    assert refused.wait(10) and not inside.is_set()
    assert Leases().hold(DeltaTable(uri), SECONDS) is True  # the maintenance lease: not held
    ours.release(DeltaTable(uri))
    thread.join(10)
    assert inside.is_set()
    assert ours.held_elsewhere(DeltaTable(uri)) is None  # released after its operation
    assert DeltaTable(uri).history(1)[0]["otel_delta.operation"] == "test lease"
