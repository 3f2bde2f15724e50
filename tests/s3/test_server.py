"""The test S3 server itself: delta-rs reads and writes tables on it, and its conditional writes
(delta-rs 1.x commits with put-if-absent) keep concurrent appenders to one table from losing a
commit, with no lock table and no AWS_S3_ALLOW_UNSAFE_RENAME."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.s3 import S3Server

pytestmark = pytest.mark.e2e

WRITERS = 4
COMMITS = 15


def test_concurrent_appenders_lose_no_commit(s3: S3Server) -> None:
    uri, options = s3.url("race"), s3.storage_options()
    write_deltalake(uri, pa.table({"x": [-1]}), storage_options=options)
    start, errors = threading.Barrier(WRITERS), []

    def append(writer: int) -> None:
        start.wait()
        for i in range(COMMITS):
            try:
                batch = pa.table({"x": [writer * 1000 + i]})
                write_deltalake(uri, batch, mode="append", storage_options=options)
            except Exception as exc:  # reported below, with the others
                errors.append(repr(exc))

    threads = [threading.Thread(target=append, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    table = DeltaTable(uri, storage_options=options)
    stored = table.to_pyarrow_table().column("x").to_pylist()
    expected = [-1] + [w * 1000 + i for w in range(WRITERS) for i in range(COMMITS)]
    assert sorted(stored) == sorted(expected)  # a commit overwritten by another would be lost
    assert table.version() == WRITERS * COMMITS
    commits = [key for key in s3.objects("race", "_delta_log") if key.endswith(".json")]
    assert len(commits) == WRITERS * COMMITS + 1
    # the race did happen: some commits found their version taken and were retried
    retries = sum(c.get("operationMetrics", {}).get("num_retries", 0) for c in table.history())
    assert retries > 0, "the writers never raced for a version: the test proves nothing"


def test_a_missing_table_is_not_a_table(s3: S3Server) -> None:
    assert not DeltaTable.is_deltatable(s3.url("nothing"), storage_options=s3.storage_options())
