"""The delta-rs writer against real tables on disk."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow.fs as pa_fs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Transaction

from otel_delta.convert import spans_to_arrow
from otel_delta.engines import DeltaRsEngine, commit_log, local_commit
from otel_delta.errors import CommitError
from otel_delta.lakehouse import COMMIT_ID, READ_VERSION, Lakehouse
from otel_delta.tables.versions import SCHEMA_VERSION, SCHEMA_VERSION_PROPERTY
from tests import corpus
from tests.test_cli import one_span_request


def test_table_is_created_with_partitions_properties_and_zstd(tmp_path: Path) -> None:
    writer = DeltaRsEngine(Lakehouse(str(tmp_path)))
    writer.append("spans", spans_to_arrow(corpus.trace_request()).tables["spans"])
    table = DeltaTable(str(tmp_path / "spans"))
    metadata = table.metadata()
    assert metadata.partition_columns == ["service_name", "date"]
    assert metadata.configuration[SCHEMA_VERSION_PROPERTY] == str(SCHEMA_VERSION)
    assert metadata.name == "spans"
    partitions = {(p["service_name"], p["date"]) for p in table.partitions()}
    assert partitions == {
        ("checkout", "2024-11-19"),
        ("checkout", "1970-01-01"),  # the corpus' span without a start time
        ("unknown_service", "2024-11-20"),
    }
    first_file = table.file_uris()[0].removeprefix("file://")
    assert pq.ParquetFile(first_file).metadata.row_group(0).column(0).compression == "ZSTD"


def test_checkpoints_are_written_at_the_interval(tmp_path: Path) -> None:
    writer = DeltaRsEngine(Lakehouse(str(tmp_path), checkpoint_interval=5))
    for i in range(1, 12):
        writer.append("spans", spans_to_arrow(one_span_request(i)).tables["spans"])
    log = tmp_path / "spans" / "_delta_log"
    checkpoints = sorted(p.name for p in log.glob("*.checkpoint.parquet"))
    assert checkpoints == [
        "00000000000000000004.checkpoint.parquet",  # delta-rs: after every 5th commit
        "00000000000000000009.checkpoint.parquet",
    ]
    assert DeltaTable(str(tmp_path / "spans")).count() == 11


def test_concurrent_writers_on_one_table_all_commit(tmp_path: Path) -> None:
    """Two writers (as two bridges would be) racing: conflict retry keeps every append."""
    writers = [DeltaRsEngine(Lakehouse(str(tmp_path))) for _ in range(2)]
    writers[0].append("spans", spans_to_arrow(one_span_request(1000)).tables["spans"])
    errors: list[BaseException] = []

    def run(w: int) -> None:
        try:
            for i in range(25):
                request = one_span_request(w * 100 + i + 1)
                writers[w].append("spans", spans_to_arrow(request).tables["spans"])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    table = DeltaTable(str(tmp_path / "spans"))
    assert table.count() == 51 and table.version() == 51


def test_partitioning_mismatch_with_existing_table_is_an_error(tmp_path: Path) -> None:
    DeltaRsEngine(Lakehouse(str(tmp_path))).append(
        "spans", spans_to_arrow(one_span_request(1)).tables["spans"]
    )
    other = DeltaRsEngine(Lakehouse(str(tmp_path), partition_by=("date",)))
    with pytest.raises(CommitError, match="partitioned by"):
        other.append("spans", spans_to_arrow(one_span_request(2)).tables["spans"])


def test_a_commit_whose_checkpoint_fails_is_not_written_twice(tmp_path: Path) -> None:
    """The commit lands, then writing its checkpoint fails: the engine's retry must see its
    own transaction in the table and stop, instead of appending the same rows again."""
    engine = DeltaRsEngine(Lakehouse(str(tmp_path), checkpoint_interval=1))
    data = spans_to_arrow(corpus.trace_request()).tables["spans"]
    engine.append("spans", data, Transaction("test-app", 1))
    last_checkpoint = tmp_path / "spans" / "_delta_log" / "_last_checkpoint"
    last_checkpoint.unlink()
    last_checkpoint.mkdir()  # every checkpoint from now on fails after its commit
    version = engine.append("spans", data, Transaction("test-app", 2))
    table = DeltaTable(str(tmp_path / "spans"))
    assert version == table.version() == 2
    assert table.to_pyarrow_table().num_rows == 2 * data.num_rows
    assert table.transaction_version("test-app") == 2
    # replaying the same transaction (e.g. after a crash) writes nothing either
    assert engine.append("spans", data, Transaction("test-app", 2)) == 2
    assert engine.append("spans", data, Transaction("test-app", 1)) == 2
    assert DeltaTable(str(tmp_path / "spans")).to_pyarrow_table().num_rows == 2 * data.num_rows


def test_an_append_after_another_writer_deleted_files_commits_first_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The cached append handle reads the log's new tail first: an append planned on the
    snapshot before a delete or compaction would fail its commit once ("a concurrent
    transaction deleted data this operation read") and be retried."""
    lakehouse = Lakehouse(str(tmp_path))
    writer = DeltaRsEngine(lakehouse)
    for i in range(1, 4):
        writer.append("spans", spans_to_arrow(one_span_request(i)).tables["spans"])
    other = DeltaTable(str(tmp_path / "spans"))  # e.g. the connector or maintenance
    other.delete("name = 's1'")
    other.optimize.compact()
    caplog.set_level("WARNING", logger="otel_delta.retry")
    version = writer.append("spans", spans_to_arrow(one_span_request(4)).tables["spans"])
    assert [r.getMessage() for r in caplog.records] == []
    assert version == 6  # 3 appends, delete, compaction, this append: no retried commit
    assert DeltaTable(str(tmp_path / "spans")).count() == 3


def test_appends_write_their_own_files_and_record_what_they_added(tmp_path: Path) -> None:
    writer = DeltaRsEngine(Lakehouse(str(tmp_path)))
    rows = spans_to_arrow(corpus.trace_request()).tables["spans"]
    version = writer.append("spans", rows)
    table = DeltaTable(str(tmp_path / "spans"))
    assert version == table.version()
    commit = table.history(1)[0]
    assert "operationMetrics" not in commit  # not written by delta-rs's writer
    assert int(commit["otel_delta.metrics.num_added_rows"]) == rows.num_rows
    assert int(commit["otel_delta.metrics.num_added_files"]) == len(table.file_uris()) == 3
    assert table.to_pyarrow_table().num_rows == rows.num_rows


def test_an_append_rebased_past_another_writers_commit_records_its_read_version(
    tmp_path: Path,
) -> None:
    first, second = (DeltaRsEngine(Lakehouse(str(tmp_path))) for _ in range(2))
    rows = spans_to_arrow(corpus.trace_request()).tables["spans"]
    first.append("spans", rows)
    stale = first.open("spans")  # planned on version 1
    second.append("spans", rows)  # version 2
    first._write("spans", stale, rows, None)  # loses the race for 2, rebased to 3
    commits = {c["version"]: c for c in DeltaTable(str(tmp_path / "spans")).history()}
    assert int(commits[3][READ_VERSION]) == 1
    assert int(commits[2][READ_VERSION]) == 1
    assert DeltaTable(str(tmp_path / "spans")).to_pyarrow_table().num_rows == 3 * rows.num_rows


@pytest.fixture
def delta_rs_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends committed by delta-rs, as on an object store or after a lost race, where on a
    local disk the engine publishes its appends itself (engines/local_commit)."""
    monkeypatch.setattr(local_commit, "blind_appendable", lambda table: False)


@pytest.mark.usefixtures("delta_rs_commits")
def test_an_append_returns_its_own_version_when_another_writer_commits_right_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handle's reload after our commit also reaches a commit another writer made right
    after it (seen in the Spark commit race, tests/spark): the append still answers with the
    version of its own commit, found in the log by its commit id."""
    writer, other = (DeltaRsEngine(Lakehouse(str(tmp_path))) for _ in range(2))
    rows = spans_to_arrow(corpus.trace_request()).tables["spans"]
    assert writer.append("spans", rows) == 1  # version 0 is the create
    commit = DeltaTable.create_write_transaction

    def and_then_another_writer(self: DeltaTable, *args: object, **kwargs: object) -> None:
        commit(self, *args, **kwargs)
        monkeypatch.undo()  # the other writer commits the plain way
        other.append("spans", rows)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", and_then_another_writer)
    assert writer.append("spans", rows) == 2
    history = {c["version"]: c for c in DeltaTable(str(tmp_path / "spans")).history()}
    assert COMMIT_ID in history[2] and COMMIT_ID in history[3]
    assert history[2][COMMIT_ID] != history[3][COMMIT_ID]
    assert writer.append("spans", rows) == 4


@pytest.mark.usefixtures("delta_rs_commits")
def test_an_append_returns_its_own_version_when_commits_land_while_it_looks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer commits right after our commit, and twice more while we reload and look
    for ours: delta-rs's history numbers its entries from the latest version it sees after
    reading them (delta-io/delta-rs#4488), so a version taken from it named the other writer's
    commit (CI's Spark commit race). The append answers with its own commit's version."""
    writer, other = (DeltaRsEngine(Lakehouse(str(tmp_path))) for _ in range(2))
    rows = spans_to_arrow(corpus.trace_request()).tables["spans"]
    assert writer.append("spans", rows) == 1
    commit, reload = DeltaTable.create_write_transaction, DeltaTable.update_incremental
    ours: list[DeltaTable] = []  # the writer's handle, once it has committed

    def and_then_another_writer(self: DeltaTable, *args: object, **kwargs: object) -> None:
        commit(self, *args, **kwargs)
        if not ours:  # the writer's commit; the other writer's own commits go through here too
            ours.append(self)
            other.append("spans", rows)

    def and_two_more_while_reloading(self: DeltaTable) -> None:
        reload(self)
        if len(ours) == 1 and self is ours[0]:
            ours.append(self)  # once
            other.append("spans", rows)
            other.append("spans", rows)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", and_then_another_writer)
    monkeypatch.setattr(DeltaTable, "update_incremental", and_two_more_while_reloading)
    version = writer.append("spans", rows)
    monkeypatch.undo()
    entries = {c["version"]: c for c in commit_log.history(_files(tmp_path), 5)}
    assert sorted(entries) == [0, 1, 2, 3, 4, 5]
    assert version == 2, entries
    assert entries[2][COMMIT_ID] != entries[3][COMMIT_ID]


def _files(root: Path) -> pa_fs.FileSystem:
    return pa_fs.SubTreeFileSystem(str(root / "spans"), pa_fs.LocalFileSystem())


def test_a_table_with_a_check_constraint_is_appended_to_by_delta_rs(tmp_path: Path) -> None:
    writer = DeltaRsEngine(Lakehouse(str(tmp_path)))
    rows = spans_to_arrow(corpus.trace_request()).tables["spans"]
    writer.append("spans", rows)
    DeltaTable(str(tmp_path / "spans")).alter.add_constraint({"named": "name IS NOT NULL"})
    writer.append("spans", rows)
    commit = DeltaTable(str(tmp_path / "spans")).history(1)[0]
    assert commit["operation"] == "WRITE"
    assert int(commit["operationMetrics"]["num_added_rows"]) == rows.num_rows


@pytest.mark.usefixtures("delta_rs_commits")
def test_a_failed_reload_after_a_commit_does_not_repeat_the_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = DeltaRsEngine(Lakehouse(str(tmp_path)))
    rows = spans_to_arrow(corpus.trace_request()).tables["spans"]
    writer.append("spans", rows)
    commit, reload = DeltaTable.create_write_transaction, DeltaTable.update_incremental
    committed = []

    def commits(self: DeltaTable, *args: object, **kwargs: object) -> None:
        commit(self, *args, **kwargs)
        committed.append(1)

    def fails_after_the_commit(self: DeltaTable) -> None:
        if committed:
            raise OSError("injected: listing the log failed")
        reload(self)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", commits)
    monkeypatch.setattr(DeltaTable, "update_incremental", fails_after_the_commit)
    assert writer.append("spans", rows) == 2  # its version, read from the log
    monkeypatch.undo()
    assert committed == [1]
    assert DeltaTable(str(tmp_path / "spans")).to_pyarrow_table().num_rows == 2 * rows.num_rows
    writer.append("spans", rows)  # the dropped handle is reopened
    assert DeltaTable(str(tmp_path / "spans")).to_pyarrow_table().num_rows == 3 * rows.num_rows


def test_the_cached_handle_reads_the_log_tail_only_after_another_writers_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a local file system a listing walks the whole log: the handle looks for the next
    version's entry first, and lists only when another writer made one. Its own commits,
    published without delta-rs, need no reading at all."""
    writer = DeltaRsEngine(Lakehouse(str(tmp_path)))
    rows = spans_to_arrow(corpus.trace_request()).tables["spans"]
    assert writer.append("spans", rows) == 1
    reload = DeltaTable.update_incremental
    reloads = []

    def counted(self: DeltaTable) -> None:
        reloads.append(self.version())
        reload(self)

    monkeypatch.setattr(DeltaTable, "update_incremental", counted)
    assert writer.append("spans", rows) == 2
    assert reloads == []
    assert DeltaRsEngine(Lakehouse(str(tmp_path))).append("spans", rows) == 3  # another writer
    reloads.clear()  # the other writer's own
    assert writer.append("spans", rows) == 4
    assert reloads == [0]  # the handle (at the create) reads the tail once: the other's commit
    assert DeltaTable(str(tmp_path / "spans")).to_pyarrow_table().num_rows == 4 * rows.num_rows


def test_a_transaction_is_looked_up_in_the_log_once_then_followed(
    tmp_path: Path, monkeypatch
) -> None:
    """delta-rs's `transaction_version` reads every log entry since the checkpoint, a GET each
    on an object store; asked before every append, it took up to 115 requests an append on S3.
    Now once per app id while the handle lives, and again after a failure (which may have
    committed): an append whose commit landed is still found, and never stored twice."""
    asked: list[str] = []
    looked_up = DeltaTable.transaction_version

    def counting(self, app_id):
        asked.append(app_id)
        return looked_up(self, app_id)

    monkeypatch.setattr(DeltaTable, "transaction_version", counting)
    engine = DeltaRsEngine(Lakehouse(str(tmp_path), checkpoint_interval=1000))
    data = spans_to_arrow(one_span_request(1)).tables["spans"]
    for position in range(1, 11):
        engine.append("spans", data, Transaction("wal", position))
    assert asked == ["wal"]
    assert engine.append("spans", data, Transaction("wal", 10)) == 10  # held: not again
    engine.append("spans", data, Transaction("backfill-batch", 1))
    assert asked == ["wal", "backfill-batch"]
    # a failure drops what was known: the next append reads the log again
    log_dir = tmp_path / "spans" / "_delta_log"
    blocker = log_dir / f"{12:020d}.json"
    blocker.mkdir()  # the next version cannot be published: every attempt fails
    with pytest.raises(CommitError):
        engine.append("spans", data, Transaction("wal", 11))
    blocker.rmdir()
    asked.clear()
    assert engine.append("spans", data, Transaction("wal", 11)) == 12
    assert asked == ["wal"]
    assert DeltaTable(str(tmp_path / "spans")).to_pyarrow_table().num_rows == 12
