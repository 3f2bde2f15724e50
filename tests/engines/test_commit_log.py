"""Commit infos read from the log's entries, numbered by their file names."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pa_fs
from deltalake import CommitProperties, DeltaTable, write_deltalake

from otel_delta.engines import commit_log


def _table(root: Path, commits: int) -> pa_fs.FileSystem:
    for k in range(commits):
        write_deltalake(
            str(root),
            pa.table({"a": [k]}),
            mode="append",
            commit_properties=CommitProperties(custom_metadata={"tag": f"c{k}"}),
        )
    return pa_fs.SubTreeFileSystem(str(root), pa_fs.LocalFileSystem())


def test_history_is_numbered_from_the_given_version_whatever_came_after(tmp_path: Path) -> None:
    files = _table(tmp_path, 10)
    stale = DeltaTable(str(tmp_path))
    _table(tmp_path, 3)  # three more commits after the handle was loaded
    entries = commit_log.history(files, stale.version(), 3)
    assert [(e["version"], e["tag"]) for e in entries] == [(9, "c9"), (8, "c8"), (7, "c7")]


def test_history_ends_where_the_log_cleanup_removed_entries(tmp_path: Path) -> None:
    files = _table(tmp_path, 70)  # more than one chunk of reads
    table = DeltaTable(str(tmp_path))
    table.create_checkpoint()
    for version in range(5):
        (tmp_path / "_delta_log" / f"{version:020d}.json").unlink()
    entries = commit_log.history(files, table.version())
    assert [e["version"] for e in entries] == list(range(69, 4, -1))
    assert entries[-1]["tag"] == "c5"
    assert commit_log.history(files, 69, 200) == entries


def test_find_commit_finds_the_first_match_after_a_version_or_none(tmp_path: Path) -> None:
    files = _table(tmp_path, 6)
    assert commit_log.find_commit(files, 1, "tag", "c4") == 4
    assert commit_log.find_commit(files, 4, "tag", "c4") is None
    assert commit_log.find_commit(files, 1, "tag", "nowhere") is None


def test_find_commit_last_finds_the_last_of_an_operation_that_committed_several_times(
    tmp_path: Path,
) -> None:
    """An operation tags each of its commits; its result reports the last of them."""
    files = _table(tmp_path, 3)
    for k in range(3):  # one operation's two commits, with another writer's between them
        write_deltalake(
            str(tmp_path),
            pa.table({"a": [k]}),
            mode="append",
            commit_properties=CommitProperties(custom_metadata={"tag": "op" if k != 1 else "x"}),
        )
    write_deltalake(str(tmp_path), pa.table({"a": [9]}), mode="append")  # and one after
    assert commit_log.find_commit(files, 0, "tag", "op") == 3
    assert commit_log.find_commit(files, 0, "tag", "op", last=True) == 5
    assert commit_log.own_commit(files, 0, "tag", "op", last=True) == 5
    assert commit_log.own_commit(files, 5, "tag", "op", last=True) is None


def test_an_entry_without_commit_info_is_empty_and_a_missing_one_is_none(tmp_path: Path) -> None:
    files = _table(tmp_path, 2)
    (tmp_path / "_delta_log" / f"{2:020d}.json").write_text('{"txn":{"appId":"a","version":1}}\n')
    assert commit_log.commit_info(files, 2) == {}
    assert commit_log.commit_info(files, 3) is None
    assert commit_log.commit_info(files, 1)["tag"] == "c1"


def test_count_commits_counts_commit_files_only(tmp_path: Path) -> None:
    files = _table(tmp_path, 12)
    DeltaTable(str(tmp_path)).create_checkpoint()  # a checkpoint and _last_checkpoint
    (tmp_path / "_delta_log" / "_commit_0123.json.tmp").write_text("{}")  # a commit in flight
    assert commit_log.count_commits(files) == 12
    (tmp_path / "_delta_log" / f"{0:020d}.json").unlink()
    assert commit_log.count_commits(files) == 11


def test_log_files_counts_commits_and_checkpoints_and_sums_every_file(tmp_path: Path) -> None:
    files = _table(tmp_path, 5)
    DeltaTable(str(tmp_path)).create_checkpoint()
    log = tmp_path / "_delta_log"
    assert commit_log.log_files(files) == commit_log.LogFiles(
        commits=5, checkpoints=1, bytes=sum(p.stat().st_size for p in log.iterdir())
    )
