"""Appends the engine publishes itself on a local disk (engines/local_commit): the same log
entries as delta-rs writes, one writer per version, delta-rs wherever it must commit."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.transaction import AddAction

from otel_delta.convert import spans_to_arrow
from otel_delta.engines import DeltaRsEngine, local_commit
from otel_delta.engines.data_files import commit_actions
from otel_delta.lakehouse import READ_VERSION, Lakehouse
from otel_delta.metrics import COMMIT_RACES
from tests import corpus

ROWS = spans_to_arrow(corpus.trace_request()).tables["spans"]


def entries(table: Path) -> dict[int, list[dict]]:
    log = table / "_delta_log"
    return {
        int(p.stem): [json.loads(line) for line in p.read_text().splitlines()]
        for p in sorted(log.glob("*.json"))
    }


def engine_info(table: Path, version: int) -> str:
    return entries(table)[version][0]["commitInfo"]["engineInfo"]


def test_paths_are_encoded_as_delta_rs_encodes_them(tmp_path: Path) -> None:
    """An add's path is percent-encoded in the log; a remove must carry the same text as the
    add it removes, so ours must be delta-rs's, character for character."""
    write_deltalake(str(tmp_path / "t"), pa.table({"p": ["x"], "v": [1]}), partition_by=["p"])
    table = DeltaTable(str(tmp_path / "t"))
    characters = [chr(c) for c in range(0x20, 0x7F)] + ["\t", "é", "€", "😀", "%41"]
    paths = [f"p={c}/file {i}+x.parquet" for i, c in enumerate(characters)]
    actions = [
        AddAction(p, 1, {"p": "x"}, 1, True, "{}")  # path, size, partitions, mtime, change, stats
        for p in paths
    ]
    commit_actions(table, actions, CommitProperties())
    written = [a["add"]["path"] for a in entries(tmp_path / "t")[1] if "add" in a]
    assert written == [local_commit.encode_path(p) for p in paths]


def test_an_append_is_published_by_the_engine_as_delta_rs_would_commit_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = DeltaRsEngine(Lakehouse(str(tmp_path / "ours")))
    assert ours.append("spans", ROWS, Transaction("wal", 7)) == 1
    monkeypatch.setattr(local_commit, "blind_appendable", lambda table: False)
    theirs = DeltaRsEngine(Lakehouse(str(tmp_path / "theirs")))
    assert theirs.append("spans", ROWS, Transaction("wal", 7)) == 1

    assert engine_info(tmp_path / "ours" / "spans", 1) == local_commit.CLIENT
    assert engine_info(tmp_path / "theirs" / "spans", 1).startswith("delta-rs")
    a, b = (DeltaTable(str(tmp_path / name / "spans")) for name in ("ours", "theirs"))
    assert a.version() == b.version() == 1
    assert a.transaction_version("wal") == b.transaction_version("wal") == 7
    key = [("span_id", "ascending"), ("service_name", "ascending")]
    assert a.to_pyarrow_table().sort_by(key).equals(b.to_pyarrow_table().sort_by(key))
    drop = ["path", "modification_time", "size_bytes"]  # file names and times differ
    adds = [
        pa.table(t.get_add_actions(flatten=True)).drop_columns(drop).sort_by("num_records")
        for t in (a, b)
    ]
    assert adds[0].equals(adds[1])
    infos = [entries(tmp_path / name / "spans")[1][0]["commitInfo"] for name in ("ours", "theirs")]
    for key in ("operation", "operationParameters", READ_VERSION):
        assert infos[0][key] == infos[1][key], key
    assert not list((tmp_path / "ours" / "spans" / "_delta_log").glob(".*.tmp"))


def test_a_version_another_writer_took_first_goes_to_delta_rs_and_is_stored_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other writer commits right before our entry is linked: the link fails, and delta-rs
    commits our files at the next version, read version the one the append was planned on."""
    writer, other = (DeltaRsEngine(Lakehouse(str(tmp_path))) for _ in range(2))
    assert writer.append("spans", ROWS, Transaction("wal", 1)) == 1
    publish = local_commit.publish
    raced: list[int] = []

    def another_writer_first(log_dir: Path, version: int, body: bytes) -> bool:
        if not raced:
            raced.append(version)
            monkeypatch.setattr(local_commit, "publish", publish)
            assert other.append("spans", ROWS) == version
        return publish(log_dir, version, body)

    monkeypatch.setattr(local_commit, "publish", another_writer_first)
    races = COMMIT_RACES.labels("spans")._value.get()
    assert writer.append("spans", ROWS, Transaction("wal", 2)) == 3
    assert raced == [2]
    assert COMMIT_RACES.labels("spans")._value.get() == races + 1  # counted once
    table = tmp_path / "spans"
    assert engine_info(table, 3).startswith("delta-rs")
    assert int(entries(table)[3][0]["commitInfo"][READ_VERSION]) == 1
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 3 * ROWS.num_rows
    assert DeltaTable(str(table)).transaction_version("wal") == 2
    assert writer.append("spans", ROWS, Transaction("wal", 3)) == 4  # its own again
    assert engine_info(table, 4) == local_commit.CLIENT


def test_without_hard_links_delta_rs_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_links(source: object, target: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    writer = DeltaRsEngine(Lakehouse(str(tmp_path)))
    with caplog.at_level(logging.WARNING):
        assert writer.append("spans", ROWS) == 1
        assert writer.append("spans", ROWS) == 2
    assert [r.getMessage() for r in caplog.records if "hard links" in r.getMessage()] == [
        f"spans: no hard links in {tmp_path / 'spans' / '_delta_log'} "
        "([Errno 1] Operation not permitted): delta-rs commits"
    ]
    assert engine_info(tmp_path / "spans", 2).startswith("delta-rs")
    assert DeltaTable(str(tmp_path / "spans")).to_pyarrow_table().num_rows == 2 * ROWS.num_rows
    assert not list((tmp_path / "spans" / "_delta_log").glob(".*.tmp"))


def test_a_failed_link_leaves_nothing_and_the_append_is_retried_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = os.link
    failures: list[int] = []

    def fails_once(source: object, target: object) -> None:
        if not failures:
            failures.append(1)
            raise OSError(errno.EIO, "Input/output error")
        link(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", fails_once)
    writer = DeltaRsEngine(Lakehouse(str(tmp_path)))
    assert writer.append("spans", ROWS, Transaction("wal", 1)) == 1
    assert failures == [1]
    table = DeltaTable(str(tmp_path / "spans"))
    assert table.to_pyarrow_table().num_rows == ROWS.num_rows
    assert engine_info(tmp_path / "spans", 1) == local_commit.CLIENT
    assert not list((tmp_path / "spans" / "_delta_log").glob(".*.tmp"))


def test_a_table_whose_protocol_asks_more_of_a_writer_is_committed_by_delta_rs(
    tmp_path: Path,
) -> None:
    """The change data feed raises the writer version to 4: a writer must then know it."""
    writer = DeltaRsEngine(Lakehouse(str(tmp_path), change_data_feed=True))
    assert writer.append("spans", ROWS) == 1
    assert DeltaTable(str(tmp_path / "spans")).protocol().min_writer_version > 2
    assert engine_info(tmp_path / "spans", 1).startswith("delta-rs")


def test_checkpoints_follow_the_appends_published_here(tmp_path: Path) -> None:
    writer = DeltaRsEngine(Lakehouse(str(tmp_path), checkpoint_interval=4))
    for i in range(1, 10):
        assert writer.append("spans", ROWS, Transaction("wal", i)) == i
    log = tmp_path / "spans" / "_delta_log"
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet")) == [
        "00000000000000000003.checkpoint.parquet",
        "00000000000000000007.checkpoint.parquet",
    ]
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 7
    table = DeltaTable(str(tmp_path / "spans"))
    assert table.to_pyarrow_table().num_rows == 9 * ROWS.num_rows
    assert table.transaction_version("wal") == 9


def test_a_version_taken_by_the_same_transaction_is_not_committed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same backfill run twice at once (the same files: the same txn id): the other run
    commits the rows right before our entry is linked. The link fails, the handle reads that
    commit, and delta-rs, planning on it, saw no conflict: the rows were stored twice."""
    writer, other = (DeltaRsEngine(Lakehouse(str(tmp_path))) for _ in range(2))
    assert writer.append("spans", ROWS) == 1
    publish = local_commit.publish
    load = Transaction("otel-delta-backfill-0123", 1)

    def the_other_run_first(log_dir: Path, version: int, body: bytes) -> bool:
        monkeypatch.setattr(local_commit, "publish", publish)
        assert other.append("spans", ROWS, load) == version
        return publish(log_dir, version, body)

    monkeypatch.setattr(local_commit, "publish", the_other_run_first)
    assert writer.append("spans", ROWS, load) == 2
    table = DeltaTable(str(tmp_path / "spans"))
    assert table.version() == 2 and table.to_pyarrow_table().num_rows == 2 * ROWS.num_rows
